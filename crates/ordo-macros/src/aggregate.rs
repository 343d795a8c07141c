//! `#[derive(Aggregate)]`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ext::IdentExt;
use syn::{DeriveInput, LitStr};

use crate::diag::{Errors, Once, skip_value, unknown_key};
use crate::names::snake_case;

/// What `#[derive(Aggregate)]` needs to know.
struct AggregateDef {
    ident: syn::Ident,
    category: String,
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
            } else {
                errors.push(unknown_key(&meta, "#[aggregate]", &["category"]));
                skip_value(&meta)
            }
        });
        errors.ok(parsed);
    }
    errors.finish()?;
    let category = category
        .into_inner()
        .map_or_else(|| snake_case(&input.ident.unraw().to_string()), |lit| lit.value());
    Ok(AggregateDef {
        ident: input.ident.clone(),
        category,
    })
}

/// A category becomes the first part of every stream name: it cannot be
/// empty or contain the separator.
fn validate_category(lit: &LitStr) -> syn::Result<()> {
    let value = lit.value();
    if value.is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            "an aggregate's category cannot be empty",
        ));
    }
    if value.contains(':') {
        return Err(syn::Error::new(
            lit.span(),
            format_args!("an aggregate's category cannot contain `:` (the stream-name separator): `{value}`"),
        ));
    }
    Ok(())
}

fn generate(def: &AggregateDef) -> TokenStream {
    let AggregateDef { ident, category } = def;
    quote! {
        #[automatically_derived]
        impl ::ordo::__private::Aggregate for #ident {
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
    }

    #[test]
    fn unknown_and_duplicate_keys_are_all_reported() {
        let errors = compile_errors(&expand(quote!(
            #[aggregate(category = "a", name = "b", category = "c")]
            struct Order;
        )));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("unknown `#[aggregate]` argument `name`; expected one of: `category`"));
        assert!(errors[1].contains("duplicate `category`"));
    }
}
