//! The macros of [Ordo](https://docs.rs/ordo). Use them through the `ordo`
//! crate (`use ordo::prelude::*;`), which re-exports them with documentation;
//! the generated code names `::ordo::__private` paths only.
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

/// Derives `Aggregate`; see `ordo::Aggregate`.
#[proc_macro_derive(Aggregate, attributes(aggregate))]
pub fn derive_aggregate(input: TokenStream) -> TokenStream {
    aggregate::expand(input.into()).into()
}

/// Derives `Message`, `Event` and `PartOf`; see `ordo::Event`.
#[proc_macro_derive(Event, attributes(event, aggregate_id))]
pub fn derive_event(input: TokenStream) -> TokenStream {
    message::expand(MessageKind::Event, input.into()).into()
}

/// Derives `Message`, `Command` and `PartOf`; see `ordo::Command`.
#[proc_macro_derive(Command, attributes(command, aggregate_id, routing_key))]
pub fn derive_command(input: TokenStream) -> TokenStream {
    message::expand(MessageKind::Command, input.into()).into()
}

/// Implements `EventHandler` for the type of an `impl` block; see `ordo::event_handler`.
#[proc_macro_attribute]
pub fn event_handler(args: TokenStream, item: TokenStream) -> TokenStream {
    handler::expand(Flavor::Event, args.into(), item.into()).into()
}

/// Implements `CommandHandler` for the type of an `impl` block; see `ordo::command_handler`.
#[proc_macro_attribute]
pub fn command_handler(args: TokenStream, item: TokenStream) -> TokenStream {
    handler::expand(Flavor::Command, args.into(), item.into()).into()
}

/// Implements `ProcessManager` for the type of an `impl` block; see `ordo::process_manager`.
#[proc_macro_attribute]
pub fn process_manager(args: TokenStream, item: TokenStream) -> TokenStream {
    handler::expand(Flavor::ProcessManager, args.into(), item.into()).into()
}

/// Marks a handler method. Only meaningful inside a handler impl, whose
/// macro consumes it; anywhere else it is an error.
#[proc_macro_attribute]
pub fn handle(args: TokenStream, item: TokenStream) -> TokenStream {
    misplaced::expand("handle", args.into(), item.into()).into()
}

/// Sets a handler's sequencing policy. Only meaningful on a handler impl or
/// one of its `#[handle]` methods, whose macro consumes it; anywhere else it
/// is an error.
#[proc_macro_attribute]
pub fn sequencing_policy(args: TokenStream, item: TokenStream) -> TokenStream {
    misplaced::expand("sequencing_policy", args.into(), item.into()).into()
}
