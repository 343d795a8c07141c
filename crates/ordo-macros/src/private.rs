//! Where the generated code finds Ordo: `crate = "..."`.
//!
//! Generated code names items through the facade's hidden `__private`
//! module, by default as `::ordo::__private`. A crate that depends on Ordo
//! under another name, or re-exports it, says where it is with
//! `crate = "path"`, as `#[serde(crate = "...")]` and tokio's
//! `#[tokio::main(crate = "...")]` do.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::LitStr;
use syn::meta::ParseNestedMeta;

use crate::diag::Errors;

/// The path of Ordo's `__private` module in the generated code.
#[derive(Clone, Default)]
pub(crate) struct Private {
    /// `crate = "..."`, when given: its tokens carry the literal's span, so
    /// a path that does not resolve is reported at the literal.
    krate: Option<syn::Path>,
}

impl Private {
    /// The module's path, with every token of the default `::ordo` at
    /// `span`: generated checks spanned at a user's type keep pointing
    /// there. A path given with `crate = "..."` keeps the literal's span.
    pub(crate) fn at(&self, span: Span) -> TokenStream {
        match &self.krate {
            Some(krate) => quote!(#krate::__private),
            None => quote::quote_spanned!(span=> ::ordo::__private),
        }
    }
}

impl ToTokens for Private {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        tokens.extend(self.at(Span::call_site()));
    }
}

/// `crate = "path"`: the path Ordo is reachable at from the annotated item.
/// A value that is not a plain path (no generics) is recorded in `errors`.
pub(crate) fn parse(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Option<Private>> {
    let lit: LitStr = meta.value()?.parse()?;
    let path = lit
        .parse_with(syn::Path::parse_mod_style)
        .ok()
        .filter(|path| path.segments.iter().all(|segment| segment.arguments.is_none()));
    if path.is_none() {
        errors.error(
            lit.span(),
            format_args!(
                "`crate` takes the path Ordo is reachable at, as a string, such as `crate = \"my_ordo\"` or \
                 `crate = \"::my_app::ordo\"`; `{}` is not a path",
                lit.value().escape_debug()
            ),
        );
    }
    Ok(path.map(|krate| Private { krate: Some(krate) }))
}
