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
use super::policy::Policy;
use crate::names::FieldName;
use crate::private::Private;

/// The trait impl for the handler type.
pub(super) fn generate(model: &HandlerModel) -> TokenStream {
    let (trait_name, kind) = match model.flavor {
        Flavor::Event => (quote!(EventHandler), quote!(Event)),
        Flavor::Command => (quote!(CommandHandler), quote!(Command)),
        Flavor::ProcessManager => (quote!(ProcessManager), quote!(ProcessManager)),
    };
    let (impl_generics, _, where_clause) = model.generics.split_for_impl();
    let self_ty = &model.self_ty;
    let private = &model.args.private;
    let checks = model.methods.iter().map(|method| checks(model, method));
    let name = &model.name;
    let part_of = match &model.args.part_of {
        Some(aggregate) => {
            quote!(::core::option::Option::Some(<#aggregate as #private::Aggregate>::CATEGORY))
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
    let unruled: Vec<(&syn::Type, &[syn::Attribute])> = model
        .methods
        .iter()
        .filter(|method| method.policy.is_none())
        .map(|method| (&method.message, &method.cfgs[..]))
        .collect();
    let policy = optional_policy(
        model
            .policy
            .as_ref()
            .map(|policy| policy_tokens(policy, &unruled, private)),
    );
    let handles = model.methods.iter().map(|method| handled_message(model, method));
    let handle = handle_fn(model);
    quote! {
        #[automatically_derived]
        impl #impl_generics #private::#trait_name for #self_ty #where_clause {
            fn descriptor() -> #private::HandlerDescriptor {
                #(#checks)*
                #private::HandlerDescriptor::new(
                    #name,
                    #private::HandlerKind::#kind,
                    ::std::vec![#(#handles),*],
                )
                .with_part_of(#part_of)
                .with_sequential_by(#sequential_by)
                .with_partitioned(#partitioned)
                .with_policy(#policy)
            }

            #handle
        }
    }
}

/// Compile-time assertions about one handled type: that it is an event (or
/// command) and that it is part of the `part_of` aggregate. (The field a
/// `property` policy reads is checked by the policy's typed extractor.)
fn checks(model: &HandlerModel, method: &HandleMethod) -> TokenStream {
    let ty = &method.message;
    // Qualified paths, not calls of bounded helpers: rustc then reports the
    // trait's own message at the type, with no note pointing into Ordo.
    let kind = match model.flavor {
        Flavor::Event | Flavor::ProcessManager => quote!(Event),
        Flavor::Command => quote!(Command),
    };
    let private = model.args.private.at(ty.span());
    let kind_check = quote_spanned! {ty.span()=>
        let _ = ::core::marker::PhantomData::<<#ty as #private::#kind>::Aggregate>;
    };
    let part_of_check = model.args.part_of.as_ref().map(|aggregate| {
        quote_spanned! {ty.span()=> let _ = <#ty as #private::PartOf<#aggregate>>::PROOF; }
    });
    let cfgs = &method.cfgs;
    quote! { #(#cfgs)* { #kind_check #part_of_check } }
}

/// A policy's tokens; a `property` policy reads its field through typed
/// extractors of `types` (the handled types in its scope, each with its
/// method's `#[cfg]` attributes).
fn policy_tokens(
    policy: &Policy,
    types: &[(&syn::Type, &[syn::Attribute])],
    private: &Private,
) -> TokenStream {
    let Some(field) = policy.property() else {
        return policy.tokens(private);
    };
    let lit = &field.lit;
    let typed = types.iter().map(|(ty, cfgs)| {
        let extractor = typed_extractor(ty, field, Reader::SequenceText, private);
        quote! {
            #(#cfgs)*
            let __ordo_policy = __ordo_policy.with_typed(#extractor);
        }
    });
    quote!({
        let __ordo_policy = #private::PropertyPolicy::new(#lit);
        #(#typed)*
        #private::policy(__ordo_policy)
    })
}

/// One `HandledMessage` literal.
fn handled_message(model: &HandlerModel, method: &HandleMethod) -> TokenStream {
    let ty = &method.message;
    let private = &model.args.private;
    let method_name = method.ident.to_string();
    let key_field = method.correlate.as_ref().or(model.args.sequential_by.as_ref());
    let key = match key_field {
        Some(field) => {
            let extractor = typed_extractor(ty, field, Reader::PartitionKey, private);
            quote!(::core::option::Option::Some(#extractor))
        }
        None => quote!(::core::option::Option::None),
    };
    let start = method.start;
    let cfgs = &method.cfgs;
    let policy = optional_policy(
        method
            .policy
            .as_ref()
            .map(|policy| policy_tokens(policy, &[(ty, &method.cfgs[..])], private)),
    );
    quote! {
        #(#cfgs)*
        #private::HandledMessage::new(
            <#ty as #private::Message>::TYPE_NAME,
            <#ty as #private::Message>::KIND,
            <#ty as #private::Message>::CATEGORY,
            #method_name,
        )
        .with_rust_type(#private::RustType::of::<#ty>())
        .with_key(#key)
        .with_start(#start)
        .with_policy(#policy)
    }
}

/// How a typed extractor turns the field into text.
#[derive(Clone, Copy)]
enum Reader {
    /// `PartitionKey`: the field's type must be able to be a key.
    PartitionKey,
    /// Sequence text: any key type, or a float, `bool` or `char`.
    SequenceText,
}

/// A `KeyExtractor` reading `field` from a `ty`, from the typed value or
/// from an envelope holding one. Doubles as the compile-time check that `ty`
/// has the field (and, for keys, that its type can be a partition key), both
/// reported at the attribute's literal.
fn typed_extractor(ty: &syn::Type, field: &FieldName, reader: Reader, private: &Private) -> TokenStream {
    let name = field.value();
    let ident = &field.ident;
    let (read, method) = match reader {
        Reader::PartitionKey => (quote!(PartitionKey), quote!(key_value)),
        Reader::SequenceText => (quote!(SequenceText), quote!(sequence_text)),
    };
    // Qualified trait calls, not bounded helpers: a field type that is neither
    // is reported at the attribute by the trait's own message.
    let spanned_private = private.at(field.span());
    let key = quote_spanned! {field.span()=>
        #spanned_private::key_text(<_ as #spanned_private::#read>::#method(&(*__ordo_message).#ident))
    };
    quote! {
        {
            fn extract(
                __ordo_message: &dyn ::core::any::Any,
            ) -> ::core::option::Option<::core::option::Option<::std::string::String>> {
                let __ordo_message = __ordo_message.downcast_ref::<#ty>()?;
                ::core::option::Option::Some(#key)
            }
            fn decode(
                __ordo_envelope: &#private::Envelope,
            ) -> ::core::option::Option<::core::option::Option<::std::string::String>> {
                extract(&#private::decode_as::<#ty>(__ordo_envelope)?)
            }
            #private::KeyExtractor::new(#name, extract).with_decode(decode)
        }
    }
}

fn optional_policy(policy: Option<TokenStream>) -> TokenStream {
    policy.unwrap_or_else(|| quote!(::core::option::Option::None))
}

/// `handle()`: dispatch on the envelope's category and type name, decode,
/// await the method, convert its error. Other types are not this handler's:
/// `Ok(())`. Generated names (`'__ordo`, `__ordo_envelope`, ...) cannot meet
/// a user's lifetimes, consts or unit structs.
fn handle_fn(model: &HandlerModel) -> TokenStream {
    let private = &model.args.private;
    let receiver = if model.flavor == Flavor::ProcessManager {
        quote!(&'__ordo mut self)
    } else {
        quote!(&'__ordo self)
    };
    // A command handler's result writes its reply into the context.
    let command = model.flavor == Flavor::Command;
    let ctx_used = command || model.methods.iter().any(|method| method.ctx.is_some());
    let ctx = if ctx_used { quote!(__ordo_ctx) } else { quote!(_) };
    let arms = model.methods.iter().map(|method| {
        let ty = &method.message;
        let ident = &method.ident;
        let args = if let Some(ctx_ty) = &method.ctx {
            // Spanned at the parameter's type: another type is reported there.
            let private = private.at(ctx_ty.span());
            let ctx = quote_spanned! {ctx_ty.span()=>
                <#ctx_ty as #private::ContextParameter>::from_context(__ordo_ctx)
            };
            quote!(&__ordo_message, #ctx)
        } else {
            quote!(&__ordo_message)
        };
        let spanned_private = private.at(method.output_span);
        let result = if command {
            quote_spanned! {method.output_span=>
                #spanned_private::IntoCommandResult::into_command_result(self.#ident(#args).await, __ordo_ctx)
            }
        } else {
            quote_spanned! {method.output_span=>
                #spanned_private::IntoHandlerResult::into_handler_result(self.#ident(#args).await)
            }
        };
        let cfgs = &method.cfgs;
        quote! {
            // What `Envelope::is` checks, written out: a type that is not a
            // message is then reported without a note into ordo-core.
            #(#cfgs)*
            if __ordo_envelope.type_name == <#ty as #private::Message>::TYPE_NAME
                && __ordo_envelope.category == <#ty as #private::Message>::CATEGORY
                && __ordo_envelope.kind == <#ty as #private::Message>::KIND
            {
                let __ordo_message = match #private::decode::<#ty>(__ordo_envelope) {
                    ::core::result::Result::Ok(__ordo_message) => __ordo_message,
                    ::core::result::Result::Err(__ordo_error) => return ::core::result::Result::Err(__ordo_error),
                };
                return #result;
            }
        }
    });
    quote! {
        fn handle<'__ordo>(
            #receiver,
            __ordo_envelope: &'__ordo #private::Envelope,
            #ctx: &'__ordo #private::HandlerContext,
        ) -> #private::BoxFuture<'__ordo, #private::HandlerResult> {
            ::std::boxed::Box::pin(async move {
                #(#arms)*
                ::core::result::Result::Ok(())
            })
        }
    }
}
