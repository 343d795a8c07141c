//! The compile-time half of `init()`'s key agreement for process managers:
//! in a partitioned process manager, the events of one category are
//! correlated by one field (the key belongs to the category). The macro
//! sees each method's `correlate` field but not the categories, so it emits
//! a constant comparing them; rustc evaluates it and reports a mismatch at
//! the second `correlate` literal.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

use super::Flavor;
use super::model::HandlerModel;

/// One `const _` per pair of methods whose `correlate` fields differ.
pub(super) fn generate(model: &HandlerModel) -> TokenStream {
    // Generic impls: the handled types may name the impl's parameters, which
    // an item outside the impl cannot; `init()` still checks those.
    if model.flavor != Flavor::ProcessManager
        || model.args.partitioned_flag.is_none()
        || !model.generics.params.is_empty()
    {
        return TokenStream::new();
    }
    let mut checks = TokenStream::new();
    for (i, first) in model.methods.iter().enumerate() {
        for second in &model.methods[i + 1..] {
            let (Some(first_field), Some(second_field)) = (&first.correlate, &second.correlate) else {
                continue;
            };
            if first_field.value() == second_field.value() {
                continue;
            }
            let (first_ty, second_ty) = (&first.message, &second.message);
            let message = format!(
                "process manager `{}` correlates `{}` by `{}` (in `{}`) and `{}` by `{}` (in `{}`), but both are \
                 events of one category: a partitioned process manager's key belongs to the category, so \
                 every event of it is correlated by the same field",
                model.name,
                shown(first_ty),
                first_field.value(),
                first.ident,
                shown(second_ty),
                second_field.value(),
                second.ident,
            );
            let cfgs = first.cfgs.iter().chain(&second.cfgs);
            let private = model.args.private.at(second_field.span());
            checks.extend(quote_spanned! {second_field.span()=>
                #(#cfgs)*
                const _: () = {
                    if #private::same_category(
                        <#first_ty as #private::Message>::CATEGORY,
                        <#second_ty as #private::Message>::CATEGORY,
                    ) {
                        ::core::panic!(#message);
                    }
                };
            });
        }
    }
    quote!(#checks)
}

fn shown(ty: &syn::Type) -> String {
    quote::ToTokens::to_token_stream(ty).to_string().replace(' ', "")
}
