//! Parsers for the values attribute keys take.
//!
//! Each returns `Err` only for a syntax error (parsing cannot go on); a value
//! that parses but is not acceptable is recorded in `errors` and yields
//! `Ok(None)`, so the remaining arguments are still checked.

use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::{Expr, Lit};

use crate::diag::Errors;
use crate::names::FieldName;

/// `part_of = Order`: the aggregate's type, as a path.
pub(crate) fn aggregate_path(
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
) -> syn::Result<Option<syn::Path>> {
    let expr: Expr = meta.value()?.parse()?;
    let error = match expr {
        Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => return Ok(Some(path.path)),
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit), ..
        }) => {
            let hint = syn::parse_str::<syn::Path>(&lit.value())
                .map(|path| {
                    format!(
                        ": write `part_of = {}`",
                        path.to_token_stream().to_string().replace(' ', "")
                    )
                })
                .unwrap_or_default();
            syn::Error::new(
                lit.span(),
                format_args!("`part_of` takes the aggregate's type, not a string{hint}"),
            )
        }
        other => syn::Error::new_spanned(
            other,
            "`part_of` takes the aggregate's type, such as `part_of = Order`",
        ),
    };
    errors.push(error);
    Ok(None)
}

/// `key = "field"`: one direct field of the message, as a string literal.
pub(crate) fn field_name(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<FieldName>> {
    if !meta.input.peek(syn::Token![=]) {
        errors.push(meta.error(format_args!(
            "`{key}` needs a field name: `{key} = \"client_id\"`"
        )));
        return Ok(None);
    }
    let expr: Expr = meta.value()?.parse()?;
    let error = match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit), ..
        }) => match FieldName::parse(lit, key) {
            Ok(field) => return Ok(Some(field)),
            Err(error) => error,
        },
        other => {
            let field = match &other {
                Expr::Path(path) => path.path.to_token_stream().to_string(),
                _ => "client_id".to_owned(),
            };
            syn::Error::new_spanned(
                other,
                format_args!("`{key}` takes the field name as a string: `{key} = \"{field}\"`"),
            )
        }
    };
    errors.push(error);
    Ok(None)
}

/// `key = "text"`: a non-empty string literal.
pub(crate) fn non_empty_str(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<syn::LitStr>> {
    let expr: Expr = meta.value()?.parse()?;
    let error = match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit), ..
        }) if !lit.value().is_empty() => return Ok(Some(lit)),
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit), ..
        }) => syn::Error::new(lit.span(), format_args!("`{key}` cannot be empty")),
        other => syn::Error::new_spanned(other, format_args!("`{key}` takes a string: `{key} = \"...\"`")),
    };
    errors.push(error);
    Ok(None)
}

/// A bare flag such as `start`; `start = true` is rejected rather than
/// silently read.
pub(crate) fn flag(meta: &ParseNestedMeta<'_>, key: &str, errors: &mut Errors) -> syn::Result<bool> {
    if meta.input.peek(syn::Token![=]) || meta.input.peek(syn::token::Paren) {
        errors.push(meta.error(format_args!("`{key}` is a flag: write `{key}` without a value")));
        crate::diag::skip_value(meta)?;
        return Ok(false);
    }
    Ok(true)
}
