//! The macros of [Ordo](https://docs.rs/ordo). Use them through the `ordo`
//! crate (`use ordo::prelude::*;`), which re-exports them. The generated code
//! names items through `::ordo::__private`, or through the path given with
//! `crate = "..."`. Each macro's documentation is on the macro itself, so it
//! reads the same here and in `ordo`.
//!
//! Every entry point delegates to an `expand` function working on
//! `proc_macro2` tokens, so expansion is unit-tested without a compiler.

mod aggregate;
mod diag;
mod handler;
mod message;
mod misplaced;
mod names;
mod private;
#[cfg(test)]
mod test_support;
mod value;

use proc_macro::TokenStream;

use handler::Flavor;
use message::MessageKind;

#[doc = include_str!("../docs/aggregate.md")]
#[proc_macro_derive(Aggregate, attributes(aggregate))]
pub fn derive_aggregate(input: TokenStream) -> TokenStream {
    aggregate::expand(input.into()).into()
}

#[doc = include_str!("../docs/message.md")]
#[proc_macro_derive(Event, attributes(event, aggregate_id))]
pub fn derive_event(input: TokenStream) -> TokenStream {
    message::expand(MessageKind::Event, input.into()).into()
}

#[doc = include_str!("../docs/message.md")]
#[proc_macro_derive(Command, attributes(command, aggregate_id, routing_key))]
pub fn derive_command(input: TokenStream) -> TokenStream {
    message::expand(MessageKind::Command, input.into()).into()
}

#[doc = include_str!("../docs/handler.md")]
#[proc_macro_attribute]
pub fn event_handler(args: TokenStream, item: TokenStream) -> TokenStream {
    handler::expand(Flavor::Event, args.into(), item.into()).into()
}

#[doc = include_str!("../docs/handler.md")]
#[proc_macro_attribute]
pub fn command_handler(args: TokenStream, item: TokenStream) -> TokenStream {
    handler::expand(Flavor::Command, args.into(), item.into()).into()
}

#[doc = include_str!("../docs/process_manager.md")]
#[proc_macro_attribute]
pub fn process_manager(args: TokenStream, item: TokenStream) -> TokenStream {
    handler::expand(Flavor::ProcessManager, args.into(), item.into()).into()
}

/// Marks a handler method: `#[handle]` in an `#[event_handler]` or
/// `#[command_handler]` impl, `#[handle(correlate = "field")]` (plus `start`)
/// in a `#[process_manager]` impl. Only meaningful inside a handler impl,
/// whose macro consumes it; anywhere else it is an error.
#[proc_macro_attribute]
pub fn handle(args: TokenStream, item: TokenStream) -> TokenStream {
    misplaced::expand("handle", args.into(), item.into()).into()
}

#[doc = include_str!("../docs/sequencing_policy.md")]
#[proc_macro_attribute]
pub fn sequencing_policy(args: TokenStream, item: TokenStream) -> TokenStream {
    misplaced::expand("sequencing_policy", args.into(), item.into()).into()
}
