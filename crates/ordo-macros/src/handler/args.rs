//! The handler attribute's own arguments.

use proc_macro2::{Span, TokenStream};
use syn::LitStr;
use syn::parse::Parser;

use super::Flavor;
use crate::diag::{Errors, Once, skip_value, unknown_key};
use crate::names::FieldName;
use crate::private::{self, Private};
use crate::value::{aggregate_path, field_name, non_empty_str};

/// `#[event_handler(part_of = Order, sequential_by = "client_id")]`, or
/// `#[process_manager(sequential_by)]`; each may carry `name = "..."` and
/// `crate = "..."`.
#[derive(Default)]
pub(super) struct HandlerArgs {
    /// The aggregate every handled message must be part of.
    pub(super) part_of: Option<syn::Path>,
    /// Event and command handlers: the partition key field.
    pub(super) sequential_by: Option<FieldName>,
    /// Process managers: the bare `sequential_by` flag, with its span.
    pub(super) partitioned_flag: Option<Span>,
    /// `name = "billing_projector"`: the handler's name, validated.
    pub(super) name: Option<LitStr>,
    /// `crate = "..."`: where the generated code finds Ordo.
    pub(super) private: Private,
}

impl HandlerArgs {
    /// Whether the handler asks the broker to partition its categories.
    pub(super) fn partitioned(&self) -> bool {
        self.sequential_by.is_some() || self.partitioned_flag.is_some()
    }
}

/// Parses the attribute arguments, recording every problem in `errors`.
pub(super) fn parse(flavor: Flavor, tokens: TokenStream, errors: &mut Errors) -> HandlerArgs {
    let attribute = format!("#[{}]", flavor.attribute());
    let mut part_of = Once::new("part_of");
    let mut sequential_by = Once::new("sequential_by");
    let mut name = Once::new("name");
    let mut krate = Once::new("crate");
    let parser = syn::meta::parser(|meta| {
        match flavor {
            _ if meta.path.is_ident("name") => {
                let lit =
                    non_empty_str(&meta, "name", errors)?.filter(|lit| errors.ok(check_name(lit)).is_some());
                errors.ok(name.set(&meta, lit));
            }
            _ if meta.path.is_ident("crate") => {
                let path = private::parse(&meta, errors)?;
                errors.ok(krate.set(&meta, path));
            }
            Flavor::Event | Flavor::Command if meta.path.is_ident("part_of") => {
                let path = aggregate_path(&meta, errors)?;
                errors.ok(part_of.set(&meta, path));
            }
            Flavor::Event | Flavor::Command if meta.path.is_ident("sequential_by") => {
                let field = field_name(&meta, "sequential_by", errors)?;
                errors.ok(sequential_by.set(&meta, field.map(Key::Field)));
            }
            Flavor::ProcessManager if meta.path.is_ident("sequential_by") => {
                if meta.input.peek(syn::Token![=]) {
                    errors.push(meta.error(
                        "a process manager's `sequential_by` is a flag: each handler's `correlate` field is its key; \
                         write `#[process_manager(sequential_by)]`",
                    ));
                    skip_value(&meta)?;
                } else {
                    let span = meta
                        .path
                        .get_ident()
                        .map_or_else(Span::call_site, syn::Ident::span);
                    errors.ok(sequential_by.set(&meta, Some(Key::Flag(span))));
                }
            }
            Flavor::Event | Flavor::Command => {
                errors.push(unknown_key(
                    &meta,
                    &attribute,
                    &["part_of", "sequential_by", "name", "crate"],
                ));
                skip_value(&meta)?;
            }
            Flavor::ProcessManager => {
                let mut error = unknown_key(&meta, &attribute, &["sequential_by", "name", "crate"]);
                if meta.path.is_ident("part_of") {
                    error = meta.error(format_args!(
                        "unknown `{attribute}` argument `part_of`: a process manager may follow several \
                         aggregates; expected one of: `sequential_by`, `name`, `crate`"
                    ));
                }
                errors.push(error);
                skip_value(&meta)?;
            }
        }
        Ok(())
    });
    let parsed = parser.parse2(tokens);
    errors.ok(parsed);
    let mut args = HandlerArgs {
        part_of: part_of.into_inner().flatten(),
        name: name.into_inner().flatten(),
        private: krate.into_inner().flatten().unwrap_or_default(),
        ..HandlerArgs::default()
    };
    match sequential_by.into_inner().flatten() {
        Some(Key::Field(field)) => args.sequential_by = Some(field),
        Some(Key::Flag(span)) => args.partitioned_flag = Some(span),
        None => {}
    }
    args
}

/// The longest handler name accepted, in bytes.
const MAX_NAME_LEN: usize = 100;

/// A handler's name names its consumer groups, leases and process state in
/// the broker: ASCII letters, digits, `_`, `-` and `.` only (no `:`, the
/// separator of stream names, no `{`/`}`, Redis Cluster hash-tag braces, no
/// spaces or control characters), at most [`MAX_NAME_LEN`] bytes.
fn check_name(lit: &LitStr) -> syn::Result<()> {
    let value = lit.value();
    let bad = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')));
    let why = if let Some(bad) = bad {
        format!("contains {:?}", bad)
    } else if value.len() > MAX_NAME_LEN {
        format!("is {} bytes long (at most {MAX_NAME_LEN})", value.len())
    } else {
        return Ok(());
    };
    Err(syn::Error::new(
        lit.span(),
        format_args!(
            "a handler's `name` {why}: it names the handler's consumer groups and state in the broker, so it \
             is made of ASCII letters, digits, `_`, `-` and `.`, such as `name = \"billing_projector\"`"
        ),
    ))
}

/// What `sequential_by` was given as.
enum Key {
    Field(FieldName),
    Flag(Span),
}
