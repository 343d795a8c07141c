//! Code generation for the handler macros.
//!
//! The compile-time checks are ordinary generated code carrying the user's
//! spans: the key extractors read `(*message).<field>` with the field ident
//! spanned at the attribute's literal (a missing field is rustc's "no field
//! `client_id` on type `OrderPlaced`" at that literal), and the trait
//! assertions name the handled type with its own span.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::Flavor;
use super::model::{HandleMethod, HandlerModel};
use crate::names::FieldName;

/// The trait impl for the handler type.
pub(super) fn generate(model: &HandlerModel) -> TokenStream {
    let (trait_name, kind) = match model.flavor {
        Flavor::Event => (quote!(EventHandler), quote!(Event)),
        Flavor::Command => (quote!(CommandHandler), quote!(Command)),
        Flavor::ProcessManager => (quote!(ProcessManager), quote!(ProcessManager)),
    };
    let (impl_generics, _, where_clause) = model.generics.split_for_impl();
    let self_ty = &model.self_ty;
    let checks = model.methods.iter().map(|method| checks(model, method));
    let name = &model.name;
    let part_of = match &model.args.part_of {
        Some(aggregate) => {
            quote!(::core::option::Option::Some(<#aggregate as ::ordo::__private::Aggregate>::CATEGORY))
        }
        None => quote!(::core::option::Option::None),
    };
    let sequential_by = match &model.args.sequential_by {
        Some(field) => {
            let lit = &field.lit;
            quote!(::core::option::Option::Some(#lit))
        }
        None => quote!(::core::option::Option::None),
    };
    let partitioned = model.args.partitioned();
    let policy = optional_policy(model.policy.as_ref().map(|policy| policy.tokens()));
    let handles = model.methods.iter().map(|method| handled_message(model, method));
    let handle = handle_fn(model);
    quote! {
        #[automatically_derived]
        impl #impl_generics ::ordo::__private::#trait_name for #self_ty #where_clause {
            fn descriptor() -> ::ordo::__private::HandlerDescriptor {
                #(#checks)*
                ::ordo::__private::HandlerDescriptor {
                    name: #name,
                    kind: ::ordo::__private::HandlerKind::#kind,
                    part_of: #part_of,
                    sequential_by: #sequential_by,
                    partitioned: #partitioned,
                    policy: #policy,
                    handles: ::std::vec![#(#handles),*],
                }
            }

            #handle
        }
    }
}

/// Compile-time assertions about one handled type: that it is an event (or
/// command), that it is part of the `part_of` aggregate, and that it has the
/// field a `property` policy reads.
fn checks(model: &HandlerModel, method: &HandleMethod) -> TokenStream {
    let ty = &method.message;
    // Qualified paths, not calls of bounded helpers: rustc then reports the
    // trait's own message at the type, with no note pointing into Ordo.
    let kind = match model.flavor {
        Flavor::Event | Flavor::ProcessManager => quote!(Event),
        Flavor::Command => quote!(Command),
    };
    let kind_check = quote_spanned! {ty.span()=>
        let _ = ::core::marker::PhantomData::<<#ty as ::ordo::__private::#kind>::Aggregate>;
    };
    let part_of_check = model.args.part_of.as_ref().map(|aggregate| {
        quote_spanned! {ty.span()=> let _ = <#ty as ::ordo::__private::PartOf<#aggregate>>::PROOF; }
    });
    let property = method
        .policy
        .as_ref()
        .or(model.policy.as_ref())
        .and_then(|policy| policy.property());
    let property_check = property.map(|field| {
        let access = field_access(field);
        quote! { let _ = |message: &#ty| { let _ = &#access; }; }
    });
    let cfgs = &method.cfgs;
    quote! { #(#cfgs)* { #kind_check #part_of_check #property_check } }
}

/// One `HandledMessage` literal.
fn handled_message(model: &HandlerModel, method: &HandleMethod) -> TokenStream {
    let ty = &method.message;
    let method_name = method.ident.to_string();
    let key_field = method.correlate.as_ref().or(model.args.sequential_by.as_ref());
    let key = match key_field {
        Some(field) => {
            let extractor = key_extractor(ty, field);
            quote!(::core::option::Option::Some(#extractor))
        }
        None => quote!(::core::option::Option::None),
    };
    let start = method.start;
    let policy = optional_policy(method.policy.as_ref().map(|policy| policy.tokens()));
    let cfgs = &method.cfgs;
    quote! {
        #(#cfgs)*
        ::ordo::__private::HandledMessage {
            type_name: <#ty as ::ordo::__private::Message>::TYPE_NAME,
            kind: <#ty as ::ordo::__private::Message>::KIND,
            category: <#ty as ::ordo::__private::Message>::CATEGORY,
            method: #method_name,
            key: #key,
            start: #start,
            policy: #policy,
        }
    }
}

/// A `KeyExtractor` reading `field` from a `ty`. Doubles as the compile-time
/// check that `ty` has the field and that its type can be a partition key,
/// both reported at the attribute's literal.
fn key_extractor(ty: &syn::Type, field: &FieldName) -> TokenStream {
    let name = field.value();
    let ident = &field.ident;
    let key = quote_spanned! {field.span()=>
        ::ordo::__private::key_text(<_ as ::ordo::__private::PartitionKey>::key_value(&(*message).#ident))
    };
    quote! {
        ::ordo::__private::KeyExtractor::new(#name, {
            fn extract(
                message: &dyn ::core::any::Any,
            ) -> ::core::option::Option<::core::option::Option<::std::string::String>> {
                let message = message.downcast_ref::<#ty>()?;
                ::core::option::Option::Some(#key)
            }
            extract
        })
    }
}

/// `(*message).field`, the field spanned at the literal naming it. The
/// explicit deref makes rustc name the message type itself (not `&T`) when
/// the field is missing.
fn field_access(field: &FieldName) -> TokenStream {
    let ident = &field.ident;
    quote!((*message).#ident)
}

fn optional_policy(policy: Option<TokenStream>) -> TokenStream {
    policy.unwrap_or_else(|| quote!(::core::option::Option::None))
}

/// `handle()`: dispatch on the envelope's type name, decode, await the
/// method, convert its error. Other types are not this handler's: `Ok(())`.
fn handle_fn(model: &HandlerModel) -> TokenStream {
    let receiver = if model.flavor == Flavor::ProcessManager {
        quote!(&'a mut self)
    } else {
        quote!(&'a self)
    };
    let ctx_used = model.methods.iter().any(|method| method.ctx.is_some());
    let ctx = if ctx_used { quote!(ctx) } else { quote!(_ctx) };
    let arms = model.methods.iter().map(|method| {
        let ty = &method.message;
        let ident = &method.ident;
        let args = if let Some(ctx_ty) = &method.ctx {
            // Spanned at the parameter's type: another type is reported there.
            let ctx = quote_spanned! {ctx_ty.span()=>
                <#ctx_ty as ::ordo::__private::ContextParameter>::from_context(ctx)
            };
            quote!(&message, #ctx)
        } else {
            quote!(&message)
        };
        let result = quote_spanned! {method.output_span=>
            ::ordo::__private::IntoHandlerResult::into_handler_result(self.#ident(#args).await)
        };
        let cfgs = &method.cfgs;
        quote! {
            #(#cfgs)*
            if envelope.type_name == <#ty as ::ordo::__private::Message>::TYPE_NAME {
                let message = match ::ordo::__private::decode::<#ty>(envelope) {
                    ::core::result::Result::Ok(message) => message,
                    ::core::result::Result::Err(error) => return ::core::result::Result::Err(error),
                };
                return #result;
            }
        }
    });
    quote! {
        fn handle<'a>(
            #receiver,
            envelope: &'a ::ordo::__private::Envelope,
            #ctx: &'a ::ordo::__private::HandlerContext,
        ) -> ::ordo::__private::BoxFuture<'a, ::ordo::__private::HandlerResult> {
            ::std::boxed::Box::pin(async move {
                #(#arms)*
                ::core::result::Result::Ok(())
            })
        }
    }
}
