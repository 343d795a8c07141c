//! Names: default categories and field names given as string literals.

use proc_macro2::{Ident, Span};
use syn::LitStr;

/// `OrderLine` → `order_line`, `HTTPRequest` → `http_request`.
pub(crate) fn snake_case(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev = i.checked_sub(1).map(|j| chars[j]);
            let next_is_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let boundary = prev.is_some_and(|p| {
                p.is_lowercase() || p.is_ascii_digit() || (p.is_uppercase() && next_is_lower)
            });
            if boundary {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A payload field named by a string literal (`sequential_by = "client_id"`,
/// `correlate = "order_id"`, `property = "client_id"`).
///
/// Its identifier carries the literal's span, so the generated code that reads
/// the field reports a missing field, or a field type that cannot be a key,
/// at the literal.
#[derive(Clone)]
pub(crate) struct FieldName {
    /// The literal as written.
    pub(crate) lit: LitStr,
    /// The field's identifier, spanned at the literal.
    pub(crate) ident: Ident,
}

impl FieldName {
    /// Validates that `lit` names one direct field.
    pub(crate) fn parse(lit: LitStr, key: &str) -> syn::Result<Self> {
        let value = lit.value();
        let ident = field_ident(&value, Span::mixed_site().located_at(lit.span())).ok_or_else(|| {
            let why = if value.is_empty() {
                "is empty".to_owned()
            } else if value.contains('.') {
                format!("`{value}` is a nested path")
            } else {
                format!("`{value}` is not a field name")
            };
            syn::Error::new(
                lit.span(),
                format_args!("`{key}` names one direct field of the message, but {why}"),
            )
        })?;
        Ok(Self { lit, ident })
    }

    /// The field's name.
    pub(crate) fn value(&self) -> String {
        self.lit.value()
    }

    /// The literal's span.
    pub(crate) fn span(&self) -> Span {
        self.lit.span()
    }
}

/// The identifier for field `name`, raw when `name` is a keyword (`type`).
fn field_ident(name: &str, span: Span) -> Option<Ident> {
    if syn::parse_str::<Ident>(name).is_ok() {
        Some(Ident::new(name, span))
    } else if syn::parse_str::<Ident>(&format!("r#{name}")).is_ok() {
        Some(Ident::new_raw(name, span))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_splits_words_and_acronyms() {
        assert_eq!(snake_case("Order"), "order");
        assert_eq!(snake_case("OrderLine"), "order_line");
        assert_eq!(snake_case("HTTPRequest"), "http_request");
        assert_eq!(snake_case("Order2Line"), "order2_line");
        assert_eq!(snake_case("ABC"), "abc");
        assert_eq!(snake_case("already_snake"), "already_snake");
    }

    #[test]
    fn field_names_must_be_direct_fields() {
        let ok = FieldName::parse(syn::parse_quote!("client_id"), "sequential_by").unwrap();
        assert_eq!(ok.ident, "client_id");
        let keyword = FieldName::parse(syn::parse_quote!("type"), "sequential_by").unwrap();
        assert_eq!(keyword.ident.to_string(), "r#type");
        for (bad, why) in [
            ("", "is empty"),
            ("order.id", "nested path"),
            ("client-id", "not a field name"),
        ] {
            let Err(error) = FieldName::parse(LitStr::new(bad, Span::call_site()), "sequential_by") else {
                panic!("{bad:?} accepted");
            };
            assert!(error.to_string().contains(why), "{bad:?}: {error}");
        }
    }
}
