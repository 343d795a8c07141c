//! The handler impl block, parsed and validated.

use proc_macro2::{Ident, Span};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{FnArg, ImplItem, ItemImpl, Type};

use super::Flavor;
use super::args::HandlerArgs;
use super::policy::{self, Policy};
use crate::diag::{Errors, Once, skip_value, take_helpers};
use crate::names::FieldName;
use crate::value::{field_name, flag};

/// Everything the generator needs.
pub(super) struct HandlerModel {
    pub(super) flavor: Flavor,
    /// The handler's name: `name = "..."`, else the last path segment of
    /// the self type.
    pub(super) name: String,
    pub(super) self_ty: Box<Type>,
    pub(super) generics: syn::Generics,
    pub(super) args: HandlerArgs,
    /// `#[sequencing_policy]` on the impl block.
    pub(super) policy: Option<Policy>,
    pub(super) methods: Vec<HandleMethod>,
}

/// One `#[handle]` method.
pub(super) struct HandleMethod {
    pub(super) ident: Ident,
    /// `T` in `event: &T`.
    pub(super) message: Type,
    /// `C` in `ctx: &C`, when the method takes the context.
    pub(super) ctx: Option<Type>,
    /// Where a return type that is not a handler result is reported.
    pub(super) output_span: Span,
    /// Process managers: `#[handle(start)]`.
    pub(super) start: bool,
    /// Process managers: `#[handle(correlate = "field")]`.
    pub(super) correlate: Option<FieldName>,
    /// `#[sequencing_policy]` on the method.
    pub(super) policy: Option<Policy>,
    /// The method's `#[cfg(...)]` attributes: the generated descriptor
    /// entry, checks and dispatch arm carry them too, so a method compiled
    /// out is not referenced.
    pub(super) cfgs: Vec<syn::Attribute>,
}

/// Parses the impl block, strips the helper attributes from it and records
/// every problem in `errors`.
pub(super) fn parse(
    flavor: Flavor,
    args: HandlerArgs,
    imp: &mut ItemImpl,
    errors: &mut Errors,
) -> HandlerModel {
    let attribute = flavor.attribute();
    if let Some((_, path, _)) = &imp.trait_ {
        errors.push(syn::Error::new_spanned(
            path,
            format_args!(
                "`#[{attribute}]` goes on an inherent impl (`impl MyHandler {{ ... }}`), not a trait impl"
            ),
        ));
    }
    for stray in take_helpers(&mut imp.attrs, "handle") {
        errors.spanned(
            stray,
            "`#[handle]` goes on methods of the impl block, not on the impl itself",
        );
    }
    let policy = single_policy(take_helpers(&mut imp.attrs, "sequencing_policy"), errors);
    let mut methods = Vec::new();
    let mut declared = 0;
    for item in &mut imp.items {
        match item {
            ImplItem::Fn(method) => match parse_method(flavor, method, errors) {
                Method::Plain => {}
                Method::Invalid => declared += 1,
                Method::Handler(handler) => {
                    declared += 1;
                    methods.push(*handler);
                }
            },
            other => reject_helpers_on(other, errors),
        }
    }
    if declared == 0 {
        errors.push(syn::Error::new_spanned(
            &imp.self_ty,
            format_args!(
                "`#[{attribute}]` found no `#[handle]` method: mark each handler method with `#[handle]`"
            ),
        ));
    }
    let model = HandlerModel {
        flavor,
        name: args
            .name
            .as_ref()
            .map_or_else(|| type_name(&imp.self_ty), syn::LitStr::value),
        self_ty: imp.self_ty.clone(),
        generics: imp.generics.clone(),
        args,
        policy,
        methods,
    };
    validate(&model, errors);
    model
}

/// The handler's name: the self type's last path segment (`OrderProjector`).
fn type_name(ty: &Type) -> String {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .map_or_else(String::new, |segment| segment.ident.to_string()),
        other => other.to_token_stream().to_string(),
    }
}

/// Checks that need the whole model.
fn validate(model: &HandlerModel, errors: &mut Errors) {
    // Two methods for one type are duplicates unless their `#[cfg]`s
    // differ (cfg alternatives: at most one is compiled in).
    let mut seen: Vec<(String, Vec<String>, &Ident)> = Vec::new();
    for method in &model.methods {
        let ty = method.message.to_token_stream().to_string();
        let cfgs: Vec<String> = method
            .cfgs
            .iter()
            .map(|cfg| cfg.to_token_stream().to_string())
            .collect();
        if let Some((_, _, first)) = seen
            .iter()
            .find(|(seen, seen_cfgs, _)| *seen == ty && *seen_cfgs == cfgs)
        {
            errors.push(syn::Error::new_spanned(
                &method.message,
                format_args!(
                    "`{}` is already handled by `{first}`: one method per message type",
                    ty.replace(' ', "")
                ),
            ));
        } else {
            seen.push((ty, cfgs, &method.ident));
        }
    }
    let policies = model
        .policy
        .iter()
        .chain(model.methods.iter().filter_map(|m| m.policy.as_ref()));
    if let Some(field) = &model.args.sequential_by {
        let field = field.value();
        for policy in policies {
            errors.spanned(
                &policy.attr,
                format_args!(
                    "`sequential_by = \"{field}\"` already is this handler's sequencing policy (the property \
                     policy on `{field}`, partitioned by the broker); remove `sequential_by` or this \
                     `#[sequencing_policy]`"
                ),
            );
        }
    } else if model.args.partitioned_flag.is_some() {
        for policy in policies {
            errors.spanned(
                &policy.attr,
                "`sequential_by` already sequences this process manager by each handler's `correlate` field; \
                 remove `sequential_by` or this `#[sequencing_policy]`",
            );
        }
    }
}

/// At most one `#[sequencing_policy]` per impl or method.
fn single_policy(attrs: Vec<syn::Attribute>, errors: &mut Errors) -> Option<Policy> {
    let mut attrs = attrs.into_iter();
    let first = attrs.next()?;
    for duplicate in attrs {
        errors.spanned(
            duplicate,
            "duplicate `#[sequencing_policy]`: give one policy (use `with = ...` to combine policies)",
        );
    }
    policy::parse(&first, errors)
}

/// Helper attributes on consts, types or macros inside the impl.
fn reject_helpers_on(item: &mut ImplItem, errors: &mut Errors) {
    let attrs = match item {
        ImplItem::Const(item) => &mut item.attrs,
        ImplItem::Type(item) => &mut item.attrs,
        ImplItem::Macro(item) => &mut item.attrs,
        _ => return,
    };
    for name in ["handle", "sequencing_policy"] {
        for stray in take_helpers(attrs, name) {
            errors.spanned(stray, format_args!("`#[{name}]` goes on a method"));
        }
    }
}

/// What a method of the impl block turned out to be.
enum Method {
    /// Not a `#[handle]` method: left alone.
    Plain,
    /// A `#[handle]` method with errors (recorded).
    Invalid,
    Handler(Box<HandleMethod>),
}

/// Parses one method, stripping its helper attributes.
fn parse_method(flavor: Flavor, method: &mut syn::ImplItemFn, errors: &mut Errors) -> Method {
    let handles = take_helpers(&mut method.attrs, "handle");
    let policies = take_helpers(&mut method.attrs, "sequencing_policy");
    let Some(handle) = handles.first() else {
        for stray in policies {
            errors.spanned(
                stray,
                "`#[sequencing_policy]` on a method needs `#[handle]`: it sets that handler's policy",
            );
        }
        return Method::Plain;
    };
    for duplicate in &handles[1..] {
        errors.spanned(duplicate, "duplicate `#[handle]`");
    }
    let (start, correlate) = parse_handle_args(flavor, handle, errors);
    if flavor == Flavor::ProcessManager && correlate.is_none() {
        errors.spanned(
            handle,
            "a process manager's `#[handle]` needs `correlate = \"field\"`: the field whose value \
             identifies the process instance, e.g. `#[handle(correlate = \"order_id\")]`",
        );
    }
    let policy = single_policy(policies, errors);
    let Some(signature) = errors.ok(parse_signature(flavor, &method.sig)) else {
        return Method::Invalid;
    };
    Method::Handler(Box::new(HandleMethod {
        ident: method.sig.ident.clone(),
        message: signature.message,
        ctx: signature.ctx,
        output_span: signature.output_span,
        start,
        correlate,
        policy,
        cfgs: method
            .attrs
            .iter()
            .filter(|attr| attr.path().is_ident("cfg"))
            .cloned()
            .collect(),
    }))
}

/// `#[handle]`, or for process managers `#[handle(start, correlate = "f")]`.
fn parse_handle_args(
    flavor: Flavor,
    attr: &syn::Attribute,
    errors: &mut Errors,
) -> (bool, Option<FieldName>) {
    let list = match &attr.meta {
        syn::Meta::Path(_) => return (false, None),
        syn::Meta::List(list) => list,
        syn::Meta::NameValue(meta) => {
            errors.error(
                meta.eq_token.span,
                "`#[handle]` takes its arguments in parentheses: `#[handle(...)]`",
            );
            return (false, None);
        }
    };
    let mut start = Once::new("start");
    let mut correlate = Once::new("correlate");
    let parsed = list.parse_nested_meta(|meta| {
        match flavor {
            Flavor::ProcessManager if meta.path.is_ident("start") => {
                let given = flag(&meta, "start", errors)?;
                errors.ok(start.set(&meta, given));
            }
            Flavor::ProcessManager if meta.path.is_ident("correlate") => {
                let field = field_name(&meta, "correlate", errors)?;
                errors.ok(correlate.set(&meta, field));
            }
            Flavor::ProcessManager => {
                errors.push(crate::diag::unknown_key(
                    &meta,
                    "#[handle]",
                    &["start", "correlate"],
                ));
                skip_value(&meta)?;
            }
            Flavor::Event | Flavor::Command => {
                let key = meta.path.to_token_stream().to_string();
                let hint = if key == "start" || key == "correlate" {
                    " (`start` and `correlate` are for `#[process_manager]` methods)"
                } else {
                    ""
                };
                errors.push(meta.error(format_args!(
                    "unknown `#[handle]` argument `{key}`; in `#[{}]` it takes no arguments{hint}",
                    flavor.attribute()
                )));
                skip_value(&meta)?;
            }
        }
        Ok(())
    });
    errors.ok(parsed);
    (
        start.into_inner().unwrap_or(false),
        correlate.into_inner().flatten(),
    )
}

/// What the signature of a `#[handle]` method tells.
struct Signature {
    message: Type,
    ctx: Option<Type>,
    output_span: Span,
}

/// `async fn name(&self, event: &T, ctx: &HandlerContext) -> Result<(), E>`
/// (`&mut self` for process managers; `ctx` optional).
fn parse_signature(flavor: Flavor, sig: &syn::Signature) -> syn::Result<Signature> {
    let mut errors = Errors::default();
    let receiver = if flavor == Flavor::ProcessManager {
        "&mut self"
    } else {
        "&self"
    };
    let noun = flavor.message_noun();
    let shape = format!(
        "`async fn {}({receiver}, {noun}: &Some{}, ctx: &HandlerContext)` (`ctx` is optional)",
        sig.ident,
        capitalised(noun)
    );
    if sig.asyncness.is_none() {
        errors.error(
            sig.fn_token.span,
            format_args!("a `#[handle]` method must be `async`: {shape}"),
        );
    }
    if !sig.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            "a `#[handle]` method cannot be generic",
        ));
    }
    let mut inputs = sig.inputs.iter();
    check_receiver(flavor, inputs.next(), sig, &shape, &mut errors);
    let message = match inputs.next() {
        Some(FnArg::Typed(arg)) => match &*arg.ty {
            Type::Reference(reference) if reference.mutability.is_none() => Some((*reference.elem).clone()),
            other => {
                errors.push(syn::Error::new_spanned(
                    other,
                    format_args!(
                        "a `#[handle]` method takes the {noun} by shared reference: `{noun}: &{}`",
                        strip_reference(other)
                            .to_token_stream()
                            .to_string()
                            .replace(' ', "")
                    ),
                ));
                None
            }
        },
        _ => {
            errors.error(
                sig.paren_token.span.join(),
                format_args!("missing the {noun} parameter: {shape}"),
            );
            None
        }
    };
    let ctx = match inputs.next() {
        Some(FnArg::Typed(arg)) => match &*arg.ty {
            Type::Reference(reference) if reference.mutability.is_none() => Some((*reference.elem).clone()),
            other => {
                errors.push(syn::Error::new_spanned(
                    other,
                    "the context parameter is `ctx: &HandlerContext`",
                ));
                None
            }
        },
        Some(other) => {
            errors.push(syn::Error::new_spanned(
                other,
                "the context parameter is `ctx: &HandlerContext`",
            ));
            None
        }
        None => None,
    };
    if let Some(extra) = inputs.next() {
        errors.push(syn::Error::new_spanned(
            extra,
            format_args!("unexpected parameter: a `#[handle]` method is {shape}"),
        ));
    }
    errors.finish()?;
    let output_span = match &sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => sig.ident.span(),
    };
    let message = message.ok_or_else(|| syn::Error::new(sig.ident.span(), "missing message parameter"))?;
    Ok(Signature {
        message,
        ctx,
        output_span,
    })
}

/// `&self` for handlers (one instance serves concurrent messages), `&mut
/// self` for process managers (each instance owns its state).
fn check_receiver(
    flavor: Flavor,
    first: Option<&FnArg>,
    sig: &syn::Signature,
    shape: &str,
    errors: &mut Errors,
) {
    let wants_mut = flavor == Flavor::ProcessManager;
    let error = match first {
        Some(FnArg::Receiver(receiver))
            if receiver.reference.is_some()
                && receiver.colon_token.is_none()
                && receiver.mutability.is_some() == wants_mut =>
        {
            return;
        }
        Some(FnArg::Receiver(receiver)) if wants_mut => syn::Error::new_spanned(
            receiver,
            "a process manager's `#[handle]` method takes `&mut self`: it updates the manager's state, \
             which is saved after each message",
        ),
        Some(FnArg::Receiver(receiver)) if receiver.mutability.is_some() && receiver.reference.is_some() => {
            syn::Error::new_spanned(
                receiver,
                format_args!(
                    "{}'s `#[handle]` method takes `&self`, not `&mut self`: one instance serves \
                     concurrent messages, so keep mutable state behind a lock (or use a `#[process_manager]`)",
                    flavor.described()
                ),
            )
        }
        Some(FnArg::Receiver(receiver)) => syn::Error::new_spanned(
            receiver,
            format_args!(
                "{}'s `#[handle]` method takes `&self`: {shape}",
                flavor.described()
            ),
        ),
        _ => syn::Error::new(
            sig.paren_token.span.join(),
            format_args!(
                "a `#[handle]` method takes `{}` first: {shape}",
                if wants_mut { "&mut self" } else { "&self" }
            ),
        ),
    };
    errors.push(error);
}

fn strip_reference(ty: &Type) -> &Type {
    match ty {
        Type::Reference(reference) => &reference.elem,
        other => other,
    }
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
