//! `#[event_handler]`, `#[command_handler]` and `#[process_manager]`.
//!
//! Parse ([`args`], [`model`], [`policy`]) into a [`model::HandlerModel`],
//! validate while parsing (every problem is recorded, none stops the others),
//! then [`generate`] the trait impl. The impl block itself is always emitted,
//! with the helper attributes stripped, so the user's methods keep compiling
//! while errors are shown.

mod args;
mod correlation;
mod generate;
mod model;
mod policy;

use proc_macro2::TokenStream;
use quote::quote;

use crate::diag::{Errors, with_errors};

/// Which handler macro is expanding.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Flavor {
    Event,
    Command,
    ProcessManager,
}

impl Flavor {
    /// The attribute's name, as users write it.
    pub(crate) fn attribute(self) -> &'static str {
        match self {
            Self::Event => "event_handler",
            Self::Command => "command_handler",
            Self::ProcessManager => "process_manager",
        }
    }

    /// "an event handler", for messages.
    fn described(self) -> &'static str {
        match self {
            Self::Event => "an event handler",
            Self::Command => "a command handler",
            Self::ProcessManager => "a process manager",
        }
    }

    /// What the handled parameter is called in messages.
    fn message_noun(self) -> &'static str {
        match self {
            Self::Command => "command",
            Self::Event | Self::ProcessManager => "event",
        }
    }
}

/// Expands a handler attribute on an `impl` block.
pub(crate) fn expand(flavor: Flavor, args: TokenStream, item: TokenStream) -> TokenStream {
    let mut imp = match syn::parse2::<syn::ItemImpl>(item.clone()) {
        Ok(imp) => imp,
        Err(_) => {
            let attribute = flavor.attribute();
            let error = syn::Error::new(
                proc_macro2::Span::call_site(),
                format!(
                    "`#[{attribute}]` goes on an `impl` block: `#[{attribute}] impl MyHandler {{ ... }}`"
                ),
            );
            return with_errors(item, &error);
        }
    };
    let mut errors = Errors::default();
    let args = args::parse(flavor, args, &mut errors);
    let model = model::parse(flavor, args, &mut imp, &mut errors);
    match errors.finish() {
        Ok(()) => {
            let generated = generate::generate(&model);
            let correlation = correlation::generate(&model);
            quote!(#imp #generated #correlation)
        }
        Err(error) => with_errors(&imp, &error),
    }
}

#[cfg(test)]
mod tests;
