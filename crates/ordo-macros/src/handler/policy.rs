//! `#[sequencing_policy(...)]` on a handler impl or one of its methods.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::diag::{Errors, skip_value};
use crate::names::FieldName;
use crate::private::Private;
use crate::value::{field_name, non_empty_str};

/// The policies `#[sequencing_policy]` accepts.
const POLICIES: &[&str] = &[
    "per_aggregate",
    "sequential",
    "full_concurrency",
    "routing_key",
    "partition_key",
    "property",
    "metadata",
    "with",
];

/// A parsed `#[sequencing_policy(...)]`.
pub(super) struct Policy {
    /// The whole attribute, for errors about where it is used.
    pub(super) attr: syn::Attribute,
    pub(super) kind: PolicyKind,
}

/// One built-in policy, or `with = <expr>`.
pub(super) enum PolicyKind {
    PerAggregate,
    Sequential,
    FullConcurrency,
    RoutingKey,
    PartitionKey,
    Property(FieldName),
    Metadata(syn::LitStr),
    With(syn::Expr),
}

/// Parses one `#[sequencing_policy(...)]`; `None` when it was malformed (the
/// problem is recorded in `errors`).
pub(super) fn parse(attr: &syn::Attribute, errors: &mut Errors) -> Option<Policy> {
    let mut kind: Option<(String, Option<PolicyKind>)> = None;
    let parsed = attr.meta.require_list().and_then(|list| {
        list.parse_nested_meta(|meta| {
            let name = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
            if let Some((first, _)) = &kind {
                errors.push(meta.error(format_args!(
                    "`#[sequencing_policy]` takes one policy, but `{name}` follows `{first}`"
                )));
                return skip_value(&meta);
            }
            let policy = match name.as_str() {
                "per_aggregate" => flag(&meta, PolicyKind::PerAggregate, errors)?,
                "sequential" => flag(&meta, PolicyKind::Sequential, errors)?,
                "full_concurrency" => flag(&meta, PolicyKind::FullConcurrency, errors)?,
                "routing_key" => flag(&meta, PolicyKind::RoutingKey, errors)?,
                "partition_key" => flag(&meta, PolicyKind::PartitionKey, errors)?,
                "property" => field_name(&meta, "property", errors)?.map(PolicyKind::Property),
                "metadata" => non_empty_str(&meta, "metadata", errors)?.map(PolicyKind::Metadata),
                "with" => Some(PolicyKind::With(meta.value()?.parse()?)),
                _ => {
                    errors.push(crate::diag::unknown_key(&meta, "#[sequencing_policy]", POLICIES));
                    skip_value(&meta)?;
                    None
                }
            };
            kind = Some((name, policy));
            Ok(())
        })
    });
    if let Err(error) = parsed {
        errors.push(error);
        return None;
    }
    match kind {
        Some((_, Some(kind))) => Some(Policy {
            attr: attr.clone(),
            kind,
        }),
        Some((_, None)) => None,
        None => {
            let list: Vec<String> = POLICIES.iter().map(|p| format!("`{p}`")).collect();
            errors.spanned(
                attr,
                format_args!(
                    "`#[sequencing_policy]` needs a policy, one of: {}",
                    list.join(", ")
                ),
            );
            None
        }
    }
}

/// A policy written as a bare word.
fn flag(
    meta: &syn::meta::ParseNestedMeta<'_>,
    kind: PolicyKind,
    errors: &mut Errors,
) -> syn::Result<Option<PolicyKind>> {
    let name = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
    Ok(crate::value::flag(meta, &name, errors)?.then_some(kind))
}

impl Policy {
    /// The `property` field, which must exist on every handled type in the
    /// policy's scope.
    pub(super) fn property(&self) -> Option<&FieldName> {
        match &self.kind {
            PolicyKind::Property(field) => Some(field),
            _ => None,
        }
    }

    /// `Option<Arc<dyn SequencingPolicy>>` holding this policy; a `with`
    /// expression that is not a policy is reported at the expression.
    pub(super) fn tokens(&self, private: &Private) -> TokenStream {
        let default = |ty: TokenStream| {
            quote!(#private::policy(
                <#private::#ty as ::core::default::Default>::default()
            ))
        };
        match &self.kind {
            PolicyKind::PerAggregate => default(quote!(PerAggregatePolicy)),
            PolicyKind::Sequential => default(quote!(SequentialPolicy)),
            PolicyKind::FullConcurrency => default(quote!(FullConcurrencyPolicy)),
            PolicyKind::RoutingKey => default(quote!(RoutingKeyPolicy)),
            PolicyKind::PartitionKey => default(quote!(PartitionKeyPolicy)),
            PolicyKind::Property(field) => {
                let lit = &field.lit;
                quote!(#private::policy(#private::PropertyPolicy::new(#lit)))
            }
            PolicyKind::Metadata(lit) => {
                quote!(#private::policy(#private::MetadataPolicy::new(#lit)))
            }
            // A cast, not a call of a bounded helper: a value that is not a
            // policy is reported at it without a note pointing into Ordo.
            PolicyKind::With(expr) => {
                let private = private.at(expr.span());
                quote_spanned! {expr.span()=>
                    ::core::option::Option::Some(
                        ::std::sync::Arc::new(#expr) as ::std::sync::Arc<dyn #private::SequencingPolicy>
                    )
                }
            }
        }
    }
}
