//! `#[handle]` and `#[sequencing_policy]` outside a handler impl.
//!
//! Inside one, the handler macro expands first and strips them; these
//! expansions only run when nothing consumed them, so they explain where the
//! attribute belongs.

use proc_macro2::{Span, TokenStream};

use crate::diag::with_errors;

/// The item unchanged, plus an error saying where `attribute` belongs.
pub(crate) fn expand(attribute: &str, _args: TokenStream, item: TokenStream) -> TokenStream {
    let message = match attribute {
        "handle" => "`#[handle]` can only be used on methods inside an `#[event_handler]`, \
                     `#[command_handler]` or `#[process_manager]` impl"
            .to_owned(),
        _ => format!(
            "`#[{attribute}]` can only be used on an `#[event_handler]`, `#[command_handler]` or \
             `#[process_manager]` impl (below that attribute) or on one of its `#[handle]` methods"
        ),
    };
    with_errors(item, &syn::Error::new(Span::call_site(), message))
}
