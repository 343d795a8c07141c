//! `#[derive(Aggregate)]`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ext::IdentExt;
use syn::{DeriveInput, LitStr};

use crate::diag::{Errors, Once, skip_value, unknown_key};
use crate::names::snake_case;
use crate::private::{self, Private};

/// What `#[derive(Aggregate)]` needs to know.
struct AggregateDef {
    ident: syn::Ident,
    category: String,
    private: Private,
}

/// Expands `#[derive(Aggregate)]`.
pub(crate) fn expand(input: TokenStream) -> TokenStream {
    let generated = syn::parse2::<DeriveInput>(input)
        .and_then(|input| parse(&input))
        .map(|def| generate(&def));
    generated.unwrap_or_else(|error| error.to_compile_error())
}

fn parse(input: &DeriveInput) -> syn::Result<AggregateDef> {
    let mut errors = Errors::default();
    if !input.generics.params.is_empty() {
        errors.error(
            input
                .generics
                .params
                .first()
                .map_or(input.ident.span(), syn::spanned::Spanned::span),
            "an aggregate cannot be generic: its category names one stream",
        );
    }
    let mut category = Once::new("category");
    let mut krate = Once::new("crate");
    for attr in input
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("aggregate"))
    {
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("category") {
                let lit: LitStr = meta.value()?.parse()?;
                errors.ok(validate_category(&lit));
                errors.ok(category.set(&meta, lit));
                Ok(())
            } else if meta.path.is_ident("crate") {
                let path = private::parse(&meta, &mut errors)?;
                errors.ok(krate.set(&meta, path));
                Ok(())
            } else {
                errors.push(unknown_key(&meta, "#[aggregate]", &["category", "crate"]));
                skip_value(&meta)
            }
        });
        errors.ok(parsed);
    }
    let category = category.into_inner();
    if category.is_none() {
        let default = snake_case(&input.ident.unraw().to_string());
        if let Some(why) = category_problem(&default) {
            errors.error(
                input.ident.span(),
                format_args!(
                    "the default category of `{}` is `{default}`, which {why}; choose another with \
                     `#[aggregate(category = \"...\")]`",
                    input.ident.unraw()
                ),
            );
        }
    }
    errors.finish()?;
    let category = category.map_or_else(|| snake_case(&input.ident.unraw().to_string()), |lit| lit.value());
    Ok(AggregateDef {
        ident: input.ident.clone(),
        category,
        private: krate.into_inner().flatten().unwrap_or_default(),
    })
}

/// A category becomes the first part of every stream name: see
/// [`category_problem`].
fn validate_category(lit: &LitStr) -> syn::Result<()> {
    match category_problem(&lit.value()) {
        Some(why) if lit.value().is_empty() => Err(syn::Error::new(
            lit.span(),
            format_args!("an aggregate's category {why}"),
        )),
        Some(why) => Err(syn::Error::new(
            lit.span(),
            format_args!("an aggregate's category {why}: `{}`", lit.value().escape_debug()),
        )),
        None => Ok(()),
    }
}

/// Why `category` cannot name a stream category, if it cannot: it is the
/// first part of every stream name (`{category}:{key}`), so it cannot be
/// empty, contain the separator `:` or a control character, be the reserved
/// lane token `dlq`, or have the reserved sentinel form `__name__` (which
/// Ordo's own keys, such as `__partitions__`, use). The same rules are
/// checked at `init()` for hand-written `Aggregate` impls.
fn category_problem(category: &str) -> Option<&'static str> {
    if category.is_empty() {
        Some("cannot be empty")
    } else if category.contains(':') {
        Some("cannot contain `:` (the stream-name separator)")
    } else if category.chars().any(char::is_control) {
        Some("cannot contain control characters (such as a newline or a tab)")
    } else if category == "dlq" {
        Some("cannot be `dlq` (the reserved dead-letter lane token)")
    } else if category.len() > 4 && category.starts_with("__") && category.ends_with("__") {
        Some("cannot have the reserved sentinel form `__name__`")
    } else {
        None
    }
}

fn generate(def: &AggregateDef) -> TokenStream {
    let AggregateDef {
        ident,
        category,
        private,
    } = def;
    quote! {
        #[automatically_derived]
        impl #private::Aggregate for #ident {
            const CATEGORY: &'static str = #category;
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::expand;
    use crate::test_support::compile_errors;

    #[test]
    fn category_defaults_to_snake_case() {
        let out = expand(quote!(
            struct OrderLine;
        ))
        .to_string();
        assert!(out.contains("\"order_line\""), "{out}");
    }

    #[test]
    fn category_override_is_validated() {
        let out = expand(quote!(
            #[aggregate(category = "orders")]
            struct Order;
        ))
        .to_string();
        assert!(out.contains("\"orders\""), "{out}");
        let errors = compile_errors(&expand(quote!(
            #[aggregate(category = "a:b")]
            struct Order;
        )));
        assert!(errors[0].contains("cannot contain `:`"), "{errors:?}");
        let errors = compile_errors(&expand(quote!(
            #[aggregate(category = "")]
            struct Order;
        )));
        assert!(errors[0].contains("cannot be empty"), "{errors:?}");
        for (bad, why) in [
            ("dlq", "reserved dead-letter lane token"),
            ("__partitions__", "reserved sentinel form"),
            ("__x__", "reserved sentinel form"),
            ("order\nline", "control characters"),
            ("tab\there", "control characters"),
        ] {
            let lit = syn::LitStr::new(bad, proc_macro2::Span::call_site());
            let errors = compile_errors(&expand(quote!(
                #[aggregate(category = #lit)]
                struct Order;
            )));
            assert_eq!(errors.len(), 1, "{bad:?}: {errors:?}");
            assert!(errors[0].contains(why), "{bad:?}: {errors:?}");
        }
        for fine in ["orders", "order_line", "__x", "x__", "shop.orders", "a b"] {
            let out = expand(quote!(
                #[aggregate(category = #fine)]
                struct Order;
            ))
            .to_string();
            assert!(!out.contains("compile_error"), "{fine:?}: {out}");
        }
    }

    #[test]
    fn crate_names_where_ordo_is() {
        let out = expand(quote!(
            #[aggregate(crate = "::my_ordo")]
            struct Order;
        ))
        .to_string();
        assert!(
            out.contains("impl :: my_ordo :: __private :: Aggregate for Order"),
            "{out}"
        );
        let errors = compile_errors(&expand(quote!(
            #[aggregate(crate = "my_ordo<u8>")]
            struct Order;
        )));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("`my_ordo<u8>` is not a path"), "{errors:?}");
    }

    #[test]
    fn a_default_category_is_checked_too() {
        let errors = compile_errors(&expand(quote!(
            struct Dlq;
        )));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("the default category of `Dlq` is `dlq`"),
            "{errors:?}"
        );
        assert!(errors[0].contains("#[aggregate(category = "), "{errors:?}");
    }

    #[test]
    fn unknown_and_duplicate_keys_are_all_reported() {
        let errors = compile_errors(&expand(quote!(
            #[aggregate(category = "a", name = "b", category = "c")]
            struct Order;
        )));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0]
                .contains("unknown `#[aggregate]` argument `name`; expected one of: `category`, `crate`")
        );
        assert!(errors[1].contains("duplicate `category`"));
    }
}
