//! `#[derive(Event)]` and `#[derive(Command)]`.

use proc_macro2::{Ident, TokenStream};
use quote::ToTokens;
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, LitStr};

use crate::diag::{Errors, Once, skip_value, unknown_key};
use crate::private::{self, Private};
use crate::value::{aggregate_path, non_empty_str};

/// Which message derive is expanding.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum MessageKind {
    Event,
    Command,
}

impl MessageKind {
    /// The container attribute (`event`, `command`).
    fn attribute(self) -> &'static str {
        match self {
            Self::Event => "event",
            Self::Command => "command",
        }
    }

    fn derive_name(self) -> &'static str {
        match self {
            Self::Event => "Event",
            Self::Command => "Command",
        }
    }
}

/// What a message derive needs to know.
struct MessageDef {
    ident: Ident,
    part_of: syn::Path,
    type_name: String,
    aggregate_id: Option<KeyMember>,
    routing_key: Option<KeyMember>,
    private: Private,
}

/// A field marked `#[aggregate_id]` or `#[routing_key]`.
struct KeyMember {
    ident: Ident,
    ty: syn::Type,
}

/// Expands `#[derive(Event)]` or `#[derive(Command)]`.
pub(crate) fn expand(kind: MessageKind, input: TokenStream) -> TokenStream {
    let generated = syn::parse2::<DeriveInput>(input)
        .and_then(|input| parse(kind, &input))
        .map(|def| generate(kind, &def));
    generated.unwrap_or_else(|error| error.to_compile_error())
}

fn parse(kind: MessageKind, input: &DeriveInput) -> syn::Result<MessageDef> {
    let mut errors = Errors::default();
    let derive = kind.derive_name();
    if let Some(param) = input.generics.params.first() {
        errors.error(
            param.span(),
            format_args!("`#[derive({derive})]` does not support generics: a message is one concrete type with one type name"),
        );
    }
    let (part_of, type_name, private) = parse_container(kind, input, &mut errors);
    let (aggregate_id, routing_key) = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(_) => parse_fields(&data.fields, &mut errors),
            _ => {
                errors.error(
                    input.ident.span(),
                    format_args!("`#[derive({derive})]` needs a struct with named fields: key fields are named in attributes"),
                );
                (None, None)
            }
        },
        _ => {
            errors.error(
                input.ident.span(),
                format_args!("`#[derive({derive})]` supports structs with named fields only"),
            );
            (None, None)
        }
    };
    if part_of.is_none() {
        let attr = kind.attribute();
        errors.error(
            input.ident.span(),
            format_args!("missing `#[{attr}(part_of = ...)]`: name the aggregate this {attr} is part of"),
        );
    }
    errors.finish()?;
    let part_of = part_of
        .flatten()
        .ok_or_else(|| syn::Error::new(input.ident.span(), "missing `part_of`"))?;
    Ok(MessageDef {
        ident: input.ident.clone(),
        part_of,
        type_name: type_name.map_or_else(
            || syn::ext::IdentExt::unraw(&input.ident).to_string(),
            |lit| lit.value(),
        ),
        aggregate_id,
        routing_key,
        private: private.unwrap_or_default(),
    })
}

/// Reads `#[event(part_of = Order, name = "...", crate = "...")]`.
fn parse_container(
    kind: MessageKind,
    input: &DeriveInput,
    errors: &mut Errors,
) -> (Option<Option<syn::Path>>, Option<LitStr>, Option<Private>) {
    let attribute = kind.attribute();
    let mut part_of = Once::new("part_of");
    let mut name = Once::new("name");
    let mut krate = Once::new("crate");
    for attr in input.attrs.iter().filter(|attr| attr.path().is_ident(attribute)) {
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("part_of") {
                let path = aggregate_path(&meta, errors)?;
                errors.ok(part_of.set(&meta, path));
            } else if meta.path.is_ident("name") {
                let lit = non_empty_str(&meta, "name", errors)?;
                errors.ok(name.set(&meta, lit));
            } else if meta.path.is_ident("crate") {
                let path = private::parse(&meta, errors)?;
                errors.ok(krate.set(&meta, path));
            } else {
                errors.push(unknown_key(
                    &meta,
                    &format!("#[{attribute}]"),
                    &["part_of", "name", "crate"],
                ));
                skip_value(&meta)?;
            }
            Ok(())
        });
        errors.ok(parsed);
    }
    (
        part_of.into_inner(),
        name.into_inner().flatten(),
        krate.into_inner().flatten(),
    )
}

/// Finds the `#[aggregate_id]` and `#[routing_key]` fields (at most one each).
fn parse_fields(fields: &Fields, errors: &mut Errors) -> (Option<KeyMember>, Option<KeyMember>) {
    let mut aggregate_id: Option<KeyMember> = None;
    let mut routing_key: Option<KeyMember> = None;
    for field in fields {
        let Some(ident) = &field.ident else { continue };
        if let Some(reference) = borrowed(&field.ty) {
            errors.spanned(
                reference,
                format_args!(
                    "field `{}` borrows (`{}`): a message is decoded from JSON into an owned value and may \
                     outlive the code that raised it, so it owns its data; use {}",
                    ident.unraw(),
                    shown_reference(reference),
                    owned_alternative(reference),
                ),
            );
        }
        for attr in &field.attrs {
            let slot = if attr.path().is_ident("aggregate_id") {
                &mut aggregate_id
            } else if attr.path().is_ident("routing_key") {
                &mut routing_key
            } else {
                continue;
            };
            let name = attr.path().get_ident().map(Ident::to_string).unwrap_or_default();
            if let Err(error) = attr.meta.require_path_only() {
                errors.error(error.span(), format_args!("`#[{name}]` takes no arguments"));
            } else if let Some(first) = slot {
                errors.spanned(
                    attr,
                    format_args!("only one field can be `#[{name}]`; `{}` already is", first.ident),
                );
            } else {
                *slot = Some(KeyMember {
                    ident: ident.clone(),
                    ty: field.ty.clone(),
                });
            }
        }
    }
    (aggregate_id, routing_key)
}

/// The first reference inside `ty` (`&'static str`, `Option<&str>`,
/// `Vec<&[u8]>`), which a message cannot hold.
fn borrowed(ty: &syn::Type) -> Option<&syn::TypeReference> {
    match ty {
        syn::Type::Reference(reference) => Some(reference),
        syn::Type::Array(array) => borrowed(&array.elem),
        syn::Type::Slice(slice) => borrowed(&slice.elem),
        syn::Type::Paren(paren) => borrowed(&paren.elem),
        syn::Type::Group(group) => borrowed(&group.elem),
        syn::Type::Tuple(tuple) => tuple.elems.iter().find_map(borrowed),
        syn::Type::Path(path) => path
            .path
            .segments
            .iter()
            .find_map(|segment| match &segment.arguments {
                syn::PathArguments::AngleBracketed(args) => args.args.iter().find_map(|arg| match arg {
                    syn::GenericArgument::Type(ty) => borrowed(ty),
                    _ => None,
                }),
                _ => None,
            }),
        _ => None,
    }
}

/// `&'static str` as written (`to_string` spaces every token).
fn shown_reference(reference: &syn::TypeReference) -> String {
    let lifetime = reference
        .lifetime
        .as_ref()
        .map(|lifetime| format!("{lifetime} "))
        .unwrap_or_default();
    let mutability = if reference.mutability.is_some() {
        "mut "
    } else {
        ""
    };
    let elem = reference.elem.to_token_stream().to_string().replace(' ', "");
    format!("&{lifetime}{mutability}{elem}")
}

/// What to write instead of a reference type.
fn owned_alternative(reference: &syn::TypeReference) -> String {
    match &*reference.elem {
        syn::Type::Path(path) if path.path.is_ident("str") => "`String` (or `Box<str>`) instead".to_owned(),
        syn::Type::Slice(slice) => format!(
            "`Vec<{}>` instead",
            slice.elem.to_token_stream().to_string().replace(' ', "")
        ),
        other => format!(
            "`{}` (or `Box<{0}>`) instead",
            other.to_token_stream().to_string().replace(' ', "")
        ),
    }
}

fn generate(kind: MessageKind, def: &MessageDef) -> TokenStream {
    let MessageDef {
        ident,
        part_of,
        type_name,
        aggregate_id,
        routing_key,
        private,
    } = def;
    let (kind_variant, message_trait) = match kind {
        MessageKind::Event => (quote!(Event), quote!(Event)),
        MessageKind::Command => (quote!(Command), quote!(Command)),
    };
    let aggregate_id = aggregate_id.as_ref().map(|member| {
        let key = key_of_self(member, private);
        quote! {
            fn aggregate_id(&self) -> ::core::option::Option<::std::string::String> { #key }
        }
    });
    let routing_key = routing_key.as_ref().map(|member| {
        let key = key_of_self(member, private);
        quote! {
            fn routing_key(&self) -> ::core::option::Option<::std::string::String> { #key }
        }
    });
    // Spanned at `part_of`: a non-aggregate there is reported there.
    let part_of_private = def.private.at(part_of.span());
    let part_of_trait = quote_spanned! {part_of.span()=> #part_of_private::PartOf<#part_of> };
    quote! {
        #[automatically_derived]
        impl #private::Message for #ident {
            const TYPE_NAME: &'static str = #type_name;
            const KIND: #private::MessageKind = #private::MessageKind::#kind_variant;
            const CATEGORY: &'static str = <#part_of as #private::Aggregate>::CATEGORY;
            #aggregate_id
        }

        #[automatically_derived]
        impl #private::#message_trait for #ident {
            type Aggregate = #part_of;
            #routing_key
        }

        #[automatically_derived]
        impl #part_of_trait for #ident {}
    }
}

/// Reads a key field of `self`; a field type that cannot be a key is
/// reported at the field's type.
fn key_of_self(member: &KeyMember, private: &Private) -> TokenStream {
    let KeyMember { ident, ty } = member;
    let private = private.at(ty.span());
    quote_spanned! {ty.span()=>
        #private::key_text(<#ty as #private::PartitionKey>::key_value(&self.#ident))
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::{MessageKind, expand};
    use crate::test_support::compile_errors;

    #[test]
    fn event_implements_message_event_and_part_of() {
        let out = expand(
            MessageKind::Event,
            quote!(
                #[event(part_of = Order)]
                struct OrderPlaced {
                    #[aggregate_id]
                    order_id: String,
                }
            ),
        )
        .to_string();
        assert!(
            out.contains("const TYPE_NAME : & 'static str = \"OrderPlaced\""),
            "{out}"
        );
        assert!(out.contains("MessageKind :: Event"), "{out}");
        assert!(out.contains("PartOf < Order > for OrderPlaced"), "{out}");
        assert!(out.contains("fn aggregate_id"), "{out}");
    }

    #[test]
    fn crate_names_where_ordo_is() {
        let out = expand(
            MessageKind::Event,
            quote!(
                #[event(part_of = Order, crate = "my_app::ordo")]
                struct OrderPlaced {
                    #[aggregate_id]
                    order_id: String,
                }
            ),
        )
        .to_string();
        assert!(
            out.contains("my_app :: ordo :: __private :: PartOf < Order >"),
            "{out}"
        );
        assert_eq!(
            out.matches("__private").count(),
            out.matches("my_app :: ordo :: __private").count(),
            "{out}"
        );
    }

    #[test]
    fn command_has_a_routing_key_override() {
        let out = expand(
            MessageKind::Command,
            quote!(
                #[command(part_of = Order, name = "order.place")]
                struct PlaceOrder {
                    #[routing_key]
                    client: String,
                }
            ),
        )
        .to_string();
        assert!(out.contains("\"order.place\""), "{out}");
        assert!(out.contains("fn routing_key"), "{out}");
        assert!(!out.contains("fn aggregate_id"), "{out}");
    }

    #[test]
    fn malformed_messages_report_every_problem() {
        let errors = compile_errors(&expand(
            MessageKind::Event,
            quote!(
                #[event(part_of = "Order", colour = "red", name = "A", name = "B")]
                struct Placed<T> {
                    #[aggregate_id]
                    a: T,
                    #[aggregate_id]
                    b: String,
                }
            ),
        ));
        let expected = [
            "does not support generics",
            "not a string: write `part_of = Order`",
            "unknown `#[event]` argument `colour`; expected one of: `part_of`, `name`, `crate`",
            "duplicate `name`",
            "only one field can be `#[aggregate_id]`; `a` already is",
        ];
        for expected in expected {
            assert!(
                errors.iter().any(|e| e.contains(expected)),
                "{expected:?} not in {errors:#?}"
            );
        }
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    }

    #[test]
    fn borrowed_fields_are_rejected_with_the_owned_alternative() {
        let errors = compile_errors(&expand(
            MessageKind::Event,
            quote!(
                #[event(part_of = Order)]
                struct Placed {
                    order_id: &'static str,
                    tags: Option<Vec<&'static [u8]>>,
                    owned: String,
                    pair: (u8, &'static u64),
                }
            ),
        ));
        assert_eq!(
            errors,
            [
                "field `order_id` borrows (`&'static str`): a message is decoded from JSON into an owned value \
                 and may outlive the code that raised it, so it owns its data; use `String` (or `Box<str>`) instead",
                "field `tags` borrows (`&'static [u8]`): a message is decoded from JSON into an owned value \
                 and may outlive the code that raised it, so it owns its data; use `Vec<u8>` instead",
                "field `pair` borrows (`&'static u64`): a message is decoded from JSON into an owned value \
                 and may outlive the code that raised it, so it owns its data; use `u64` (or `Box<u64>`) instead",
            ]
        );
    }

    #[test]
    fn part_of_is_required() {
        let errors = compile_errors(&expand(
            MessageKind::Command,
            quote!(
                struct PlaceOrder {
                    id: String,
                }
            ),
        ));
        assert_eq!(
            errors,
            ["missing `#[command(part_of = ...)]`: name the aggregate this command is part of"]
        );
    }

    #[test]
    fn only_structs_with_named_fields() {
        let errors = compile_errors(&expand(
            MessageKind::Event,
            quote!(
                #[event(part_of = O)]
                struct T(u8);
            ),
        ));
        assert!(
            errors[0].contains("needs a struct with named fields"),
            "{errors:?}"
        );
        let errors = compile_errors(&expand(
            MessageKind::Command,
            quote!(
                #[command(part_of = O)]
                enum E {
                    A,
                }
            ),
        ));
        assert!(errors[0].contains("structs with named fields only"), "{errors:?}");
    }
}
