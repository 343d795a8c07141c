//! Ordo: per-key ordered processing of events and commands.
//!
//! Messages with the same key are handled one after another, in publish
//! order, on one instance or across many; messages with different keys are
//! handled in parallel. You declare the key where you declare the handler,
//! and the macros check at compile time that every handled message has that
//! field and that its type can be a key.
//!
//! ```
//! use ordo::prelude::*;
//!
//! #[derive(Aggregate)]
//! struct Order; // stream category "order"
//!
//! #[derive(Debug, Clone, Serialize, Deserialize, Event)]
//! #[event(part_of = Order)]
//! struct OrderPlaced {
//!     #[aggregate_id]
//!     order_id: String,
//!     client_id: String,
//!     amount: u64,
//! }
//!
//! struct OrderProjector;
//!
//! // One client's orders are projected one at a time, in order.
//! #[event_handler(part_of = Order, sequential_by = "client_id")]
//! impl OrderProjector {
//!     #[handle]
//!     async fn on_placed(&self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
//!         println!("{} ordered {} (attempt {})", event.client_id, event.amount, ctx.attempt());
//!         Ok(())
//!     }
//! }
//!
//! let descriptor = OrderProjector::descriptor();
//! assert_eq!(descriptor.part_of, Some("order"));
//! assert_eq!(descriptor.sequential_by, Some("client_id"));
//! assert_eq!(descriptor.handles[0].type_name, "OrderPlaced");
//! ```
//!
//! Handlers are registered explicitly when the domain is built; see the
//! `domain` module.
//!
//! # Depending on Ordo
//!
//! Messages travel as JSON, so they derive serde's `Serialize` and
//! `Deserialize` (re-exported by the [`prelude`]). serde's derives expand to
//! code that names the `serde` crate, so add `serde` to your own
//! dependencies next to `ordo`.
//!
//! # The macros
//!
//! ## `#[derive(Aggregate)]`
//!
//! Implements [`Aggregate`]. The stream category defaults to the type's name
//! in snake case (`OrderLine` → `order_line`); `#[aggregate(category =
//! "orders")]` overrides it. A category cannot be empty, contain `:` or a
//! control character, be `dlq`, or have the reserved form `__name__`.
//!
//! ## `#[derive(Event)]` and `#[derive(Command)]`
//!
//! On a struct with named fields. `#[event(part_of = Order)]` (or
//! `#[command(...)]`) names the aggregate and is required; `name = "..."`
//! overrides the type name written into envelopes (default: the struct's
//! name). Implements [`Message`], [`Event`] (or [`Command`]) and
//! [`PartOf<Order>`](PartOf). Field attributes:
//! - `#[aggregate_id]`: the field returned by [`Message::aggregate_id`], read
//!   by the per-aggregate sequencing policy;
//! - `#[routing_key]` (commands): the field returned by
//!   [`Command::routing_key`] (default: the aggregate id).
//!
//! Both fields must have a partition-key type ([`PartitionKey`]). A message is
//! decoded from JSON into an owned value, so its fields own their data: a
//! borrowed field (`&'static str`) is rejected; use `String`.
//!
//! ```
//! use ordo::prelude::*;
//!
//! #[derive(Aggregate)]
//! #[aggregate(category = "orders")]
//! struct Order;
//!
//! #[derive(Serialize, Deserialize, Command)]
//! #[command(part_of = Order, name = "order.place")]
//! struct PlaceOrder {
//!     #[aggregate_id]
//!     order_id: String,
//!     #[routing_key]
//!     client_id: u64,
//! }
//!
//! let place = PlaceOrder { order_id: "o-1".into(), client_id: 7 };
//! assert_eq!(<PlaceOrder as Message>::CATEGORY, "orders");
//! assert_eq!(<PlaceOrder as Message>::TYPE_NAME, "order.place");
//! assert_eq!(place.aggregate_id().as_deref(), Some("o-1"));
//! assert_eq!(place.routing_key().as_deref(), Some("7"));
//! ```
//!
//! ## `#[event_handler]` and `#[command_handler]`
//!
//! On an inherent `impl` block. Arguments, all optional:
//! - `part_of = Order`: every handled message must be part of `Order`;
//! - `sequential_by = "field"`: the partition key; every handled message must
//!   have that field, of a [`PartitionKey`] type;
//! - `name = "billing_projector"`: the handler's name (default: the type's
//!   last path segment, so `Projector<Stdout>` and `Projector<Stderr>`, or
//!   `billing::Projector` and `shipping::Projector`, need one each). It names
//!   the handler's consumer groups and state, must be unique in a domain and
//!   is made of ASCII letters, digits, `_`, `-` and `.`.
//!   `#[process_manager]` takes it too.
//!
//! Each handler method is marked `#[handle]` and has the shape
//! `async fn name(&self, event: &SomeEvent, ctx: &HandlerContext) -> Result<(), E>`
//! where `ctx` is optional and `E` converts into [`HandlerError`]
//! (`anyhow::Error` does). The macro implements [`EventHandler`] (or
//! [`CommandHandler`]) for the type. A `#[cfg(...)]` on a method applies to
//! its registration too, so cfg alternatives may handle one type.
//!
//! ```
//! use ordo::prelude::*;
//!
//! # #[derive(Aggregate)] struct Order;
//! # #[derive(Serialize, Deserialize, Event)] #[event(part_of = Order)]
//! # struct OrderPlaced { order_id: String }
//! struct Stdout;
//! struct Stderr;
//! struct Printer<W>(std::marker::PhantomData<W>);
//!
//! #[event_handler(part_of = Order, name = "printer.stdout")]
//! impl Printer<Stdout> {
//!     #[handle]
//!     async fn on_placed(&self, event: &OrderPlaced) -> anyhow::Result<()> {
//!         println!("{}", event.order_id);
//!         Ok(())
//!     }
//! }
//!
//! #[event_handler(part_of = Order, name = "printer.stderr")]
//! impl Printer<Stderr> {
//!     #[handle]
//!     async fn on_placed(&self, event: &OrderPlaced) -> anyhow::Result<()> {
//!         eprintln!("{}", event.order_id);
//!         Ok(())
//!     }
//! }
//! # assert_eq!(Printer::<Stdout>::descriptor().name, "printer.stdout");
//! ```
//!
//! ## `#[process_manager]`
//!
//! On the `impl` block of a type that is `Default + Serialize +
//! Deserialize`: one instance per correlation value. The bare flag
//! `#[process_manager(sequential_by)]` partitions by correlation value. Each
//! method is `#[handle(correlate = "order_id")]` (plus `start` when the event
//! may start a new instance) and takes `&mut self`.
//!
//! ```
//! use ordo::prelude::*;
//!
//! # #[derive(Aggregate)] struct Order;
//! # #[derive(Serialize, Deserialize, Event)] #[event(part_of = Order)]
//! # struct OrderPlaced { order_id: String }
//! # #[derive(Serialize, Deserialize, Event)] #[event(part_of = Order)]
//! # struct OrderShipped { order_id: String }
//! #[derive(Default, Serialize, Deserialize)]
//! struct Fulfillment {
//!     placed: bool,
//! }
//!
//! #[process_manager(sequential_by)]
//! impl Fulfillment {
//!     #[handle(start, correlate = "order_id")]
//!     async fn on_placed(&mut self, _event: &OrderPlaced) -> anyhow::Result<()> {
//!         self.placed = true;
//!         Ok(())
//!     }
//!
//!     #[handle(correlate = "order_id")]
//!     async fn on_shipped(&mut self, _event: &OrderShipped, _ctx: &HandlerContext) -> anyhow::Result<()> {
//!         Ok(())
//!     }
//! }
//!
//! let descriptor = Fulfillment::descriptor();
//! assert!(descriptor.partitioned);
//! assert!(descriptor.handles[0].start);
//! ```
//!
//! ## `#[sequencing_policy(...)]`
//!
//! On a handler impl (below the handler attribute) or on one `#[handle]`
//! method; the method's wins. One of `per_aggregate`, `sequential`,
//! `full_concurrency`, `routing_key`, `partition_key`, `property = "field"`
//! (checked at compile time like `sequential_by`), `metadata = "key"`, or
//! `with = <expr>` for any [`SequencingPolicy`] value. It cannot be combined
//! with `sequential_by`, which already is the property policy on its field.
//! The property policy reads the JSON payload, so a field it names must keep
//! its Rust name when serialised (no `#[serde(rename)]`).
//!
//! ```
//! use ordo::prelude::*;
//!
//! # #[derive(Aggregate)] struct Order;
//! # #[derive(Serialize, Deserialize, Event)] #[event(part_of = Order)]
//! # struct OrderPlaced { order_id: String, region: String }
//! # #[derive(Serialize, Deserialize, Event)] #[event(part_of = Order)]
//! # struct OrderShipped { order_id: String }
//! struct Audit;
//!
//! #[event_handler]
//! #[sequencing_policy(property = "region")]
//! impl Audit {
//!     #[handle]
//!     async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
//!         Ok(())
//!     }
//!
//!     #[handle]
//!     #[sequencing_policy(full_concurrency)]
//!     async fn on_shipped(&self, _event: &OrderShipped) -> anyhow::Result<()> {
//!         Ok(())
//!     }
//! }
//! # assert!(Audit::descriptor().policy.is_some());
//! ```

pub use ordo_core::*;
pub use ordo_macros::{
    Aggregate, Command, Event, command_handler, event_handler, handle, process_manager, sequencing_policy,
};

/// Everything a module declaring messages and handlers needs:
/// `use ordo::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Aggregate, Command, CommandHandler, Event, EventHandler, HandlerContext, HandlerError, HandlerResult,
        Message, ProcessManager, SequencingPolicy, command_handler, event_handler, handle, process_manager,
        sequencing_policy,
    };
    pub use crate::{
        ExtractionPolicy, FullConcurrencyPolicy, HierarchicalPolicy, MetadataPolicy, PartitionKeyPolicy,
        PerAggregatePolicy, PropertyPolicy, RoutingKeyPolicy, SequentialPolicy,
    };
    pub use ordo_core::{
        CommitError, Config, DispatchError, Domain, IncorrectUsageError, InlineBroker, UnitOfWork,
    };
    pub use serde::{Deserialize, Serialize};
}

/// What the macros' generated code names. Not public API: it may change in
/// any release.
#[doc(hidden)]
pub mod __private {
    use std::borrow::Cow;
    use std::sync::Arc;

    pub use ordo_core::{
        Aggregate, BoxFuture, Command, CommandHandler, ContextParameter, Envelope, Event, EventHandler,
        FullConcurrencyPolicy, HandledMessage, HandlerContext, HandlerDescriptor, HandlerError, HandlerKind,
        HandlerResult, IntoHandlerResult, KeyExtractor, Message, MessageKind, MetadataPolicy, PartOf,
        PartitionKey, PartitionKeyPolicy, PerAggregatePolicy, ProcessManager, PropertyPolicy,
        RoutingKeyPolicy, RustType, SequenceText, SequencingPolicy, SequentialPolicy,
    };
    pub use serde;

    /// The text of a key field; `None` for a null key. The generated code
    /// calls it as `key_text(<_ as PartitionKey>::key_value(&field))`: a
    /// field type that is not a key is then reported at the attribute by
    /// `PartitionKey`'s own message, with no note pointing here.
    pub fn key_text(key: Option<Cow<'_, str>>) -> Option<String> {
        key.map(Cow::into_owned)
    }

    /// Whether two categories are the same (`==` for `&str` in constants).
    pub const fn same_category(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The message `envelope` holds, when it holds an `M` that decodes.
    pub fn decode_as<M: Message>(envelope: &Envelope) -> Option<M> {
        if envelope.is::<M>() {
            envelope.decode().ok()
        } else {
            None
        }
    }

    /// Decodes an envelope's payload for a handler.
    pub fn decode<M: Message>(envelope: &Envelope) -> Result<M, HandlerError> {
        envelope.decode().map_err(HandlerError::from)
    }

    /// A sequencing policy as the descriptors store it.
    pub fn policy<P: SequencingPolicy>(policy: P) -> Option<Arc<dyn SequencingPolicy>> {
        Some(Arc::new(policy))
    }
}
