//! Error plumbing shared by every macro: accumulation, set-once arguments,
//! unknown-key messages and "item plus errors" output.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;

/// Collects errors so that one expansion reports every problem at once
/// instead of making the user fix them one compile at a time.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Records `error`.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(existing) => existing.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Records a new error spanned at `span`.
    pub(crate) fn error(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Records a new error spanning all of `tokens` (an attribute, a type).
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Keeps the value of `result`, recording its error.
    pub(crate) fn ok<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    /// `Ok` when nothing was recorded, else every recorded error.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// An attribute argument that may be given at most once; the second
/// occurrence is an error spanned at its key.
pub(crate) struct Once<T> {
    key: &'static str,
    value: Option<T>,
}

impl<T> Once<T> {
    /// An unset argument named `key`.
    pub(crate) fn new(key: &'static str) -> Self {
        Self { key, value: None }
    }

    /// Sets the value, or reports a duplicate spanned at `meta`'s key.
    pub(crate) fn set(&mut self, meta: &ParseNestedMeta<'_>, value: T) -> syn::Result<()> {
        if self.value.is_some() {
            return Err(meta.error(format_args!("duplicate `{}` argument", self.key)));
        }
        self.value = Some(value);
        Ok(())
    }

    /// The value, if set.
    pub(crate) fn into_inner(self) -> Option<T> {
        self.value
    }
}

/// The error for a key `attribute` does not know, listing the keys it does.
pub(crate) fn unknown_key(meta: &ParseNestedMeta<'_>, attribute: &str, valid: &[&str]) -> syn::Error {
    let key = meta.path.to_token_stream().to_string().replace(' ', "");
    let expected = if valid.is_empty() {
        "it takes no arguments".to_owned()
    } else {
        let list: Vec<String> = valid.iter().map(|key| format!("`{key}`")).collect();
        format!("expected one of: {}", list.join(", "))
    };
    meta.error(format_args!("unknown `{attribute}` argument `{key}`; {expected}"))
}

/// Consumes whatever value follows a key that was rejected, so parsing can go
/// on and report the remaining arguments too.
pub(crate) fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<syn::Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.input.parse::<proc_macro2::Group>()?;
    }
    Ok(())
}

/// The item followed by the errors: the item keeps compiling (and IDEs keep
/// completing) while the errors are reported.
pub(crate) fn with_errors(item: impl ToTokens, error: &syn::Error) -> TokenStream {
    let mut tokens = item.into_token_stream();
    tokens.extend(error.to_compile_error());
    tokens
}

/// Whether `attr` is the helper attribute `name`, written bare (`#[handle]`)
/// or through the facade (`#[ordo::handle]`).
pub(crate) fn is_helper(attr: &syn::Attribute, name: &str) -> bool {
    let path = attr.path();
    path.is_ident(name)
        || (path.segments.len() >= 2
            && path.segments.first().is_some_and(|s| s.ident == "ordo")
            && path.segments.last().is_some_and(|s| s.ident == name))
}

/// Removes and returns the helper attributes called `name` from `attrs`.
pub(crate) fn take_helpers(attrs: &mut Vec<syn::Attribute>, name: &str) -> Vec<syn::Attribute> {
    let (taken, kept) = std::mem::take(attrs)
        .into_iter()
        .partition(|attr| is_helper(attr, name));
    *attrs = kept;
    taken
}
