//! Expansion tests: parsing and validation of the handler macros. What the
//! generated code does at runtime is tested in `crates/ordo/tests/macros.rs`,
//! and the compile-time checks in the trybuild UI tests.

use proc_macro2::TokenStream;
use quote::quote;

use super::{Flavor, expand};
use crate::test_support::compile_errors;

fn errors(flavor: Flavor, args: TokenStream, item: TokenStream) -> Vec<String> {
    compile_errors(&expand(flavor, args, item))
}

fn assert_has(errors: &[String], expected: &str) {
    assert!(
        errors.iter().any(|error| error.contains(expected)),
        "{expected:?} not in {errors:#?}"
    );
}

fn projector() -> TokenStream {
    quote! {
        impl Projector {
            #[handle]
            async fn on_placed(&self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> { Ok(()) }
        }
    }
}

#[test]
fn a_valid_handler_expands_without_errors_and_strips_helpers() {
    let out = expand(
        Flavor::Event,
        quote!(part_of = Order, sequential_by = "client_id"),
        projector(),
    );
    assert!(compile_errors(&out).is_empty(), "{out}");
    let text = out.to_string();
    assert!(!text.contains("# [handle]"), "helper attribute left in: {text}");
    assert!(text.contains("EventHandler for Projector"), "{text}");
    assert!(text.contains("\"client_id\""), "{text}");
}

#[test]
fn unknown_and_duplicate_keys_are_reported_together() {
    let errors = errors(
        Flavor::Event,
        quote!(
            part_of = Order,
            colour = "red",
            part_of = Order,
            sequential_by = "a",
            sequential_by = "b"
        ),
        projector(),
    );
    assert_has(
        &errors,
        "unknown `#[event_handler]` argument `colour`; expected one of: `part_of`, `sequential_by`",
    );
    assert_has(&errors, "duplicate `part_of` argument");
    assert_has(&errors, "duplicate `sequential_by` argument");
}

#[test]
fn argument_values_are_checked() {
    let errors = errors(
        Flavor::Command,
        quote!(part_of = "Order", sequential_by = client_id),
        projector(),
    );
    assert_has(
        &errors,
        "`part_of` takes the aggregate's type, not a string: write `part_of = Order`",
    );
    assert_has(
        &errors,
        "`sequential_by` takes the field name as a string: `sequential_by = \"client_id\"`",
    );
    let errors = super::tests::errors(Flavor::Event, quote!(sequential_by), projector());
    assert_has(&errors, "`sequential_by` needs a field name");
    let errors = super::tests::errors(Flavor::Event, quote!(sequential_by = "order.id"), projector());
    assert_has(
        &errors,
        "`sequential_by` names one direct field of the message, but `order.id` is a nested path",
    );
}

#[test]
fn process_manager_sequential_by_is_a_flag() {
    let item = quote! {
        impl Fulfillment {
            #[handle(start, correlate = "order_id")]
            async fn on_placed(&mut self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
        }
    };
    assert!(errors(Flavor::ProcessManager, quote!(sequential_by), item.clone()).is_empty());
    let errors = errors(
        Flavor::ProcessManager,
        quote!(sequential_by = "order_id", part_of = Order),
        item,
    );
    assert_has(&errors, "a process manager's `sequential_by` is a flag");
    assert_has(&errors, "unknown `#[process_manager]` argument `part_of`");
}

#[test]
fn process_manager_handlers_need_correlate() {
    let errors = errors(
        Flavor::ProcessManager,
        quote!(),
        quote! {
            impl Fulfillment {
                #[handle(start)]
                async fn on_placed(&mut self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
                #[handle(correlate = "order_id", begin, start = true)]
                async fn on_paid(&mut self, event: &OrderPaid) -> anyhow::Result<()> { Ok(()) }
            }
        },
    );
    assert_has(
        &errors,
        "a process manager's `#[handle]` needs `correlate = \"field\"`",
    );
    assert_has(
        &errors,
        "unknown `#[handle]` argument `begin`; expected one of: `start`, `correlate`",
    );
    assert_has(&errors, "`start` is a flag");
}

#[test]
fn handle_arguments_are_for_process_managers_only() {
    let errors = errors(
        Flavor::Event,
        quote!(),
        quote! {
            impl Projector {
                #[handle(start)]
                async fn on_placed(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
            }
        },
    );
    assert_has(
        &errors,
        "in `#[event_handler]` it takes no arguments (`start` and `correlate` are for",
    );
}

#[test]
fn bad_signatures_are_reported() {
    let errors = errors(
        Flavor::Event,
        quote!(),
        quote! {
            impl Projector {
                #[handle]
                fn not_async(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
                #[handle]
                async fn mutable(&mut self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
                #[handle]
                async fn no_event(&self) -> anyhow::Result<()> { Ok(()) }
                #[handle]
                async fn by_value(&self, event: OrderPlaced) -> anyhow::Result<()> { Ok(()) }
                #[handle]
                async fn too_many(&self, event: &OrderPaid, ctx: &HandlerContext, extra: u8) -> anyhow::Result<()> { Ok(()) }
                #[handle]
                async fn generic<T>(&self, event: &T) -> anyhow::Result<()> { Ok(()) }
            }
        },
    );
    assert_has(&errors, "a `#[handle]` method must be `async`");
    assert_has(
        &errors,
        "an event handler's `#[handle]` method takes `&self`, not `&mut self`",
    );
    assert_has(
        &errors,
        "missing the event parameter: `async fn no_event(&self, event: &SomeEvent, ctx: &HandlerContext)`",
    );
    assert_has(
        &errors,
        "takes the event by shared reference: `event: &OrderPlaced`",
    );
    assert_has(&errors, "unexpected parameter");
    assert_has(&errors, "cannot be generic");
    assert!(
        !errors.iter().any(|e| e.contains("found no `#[handle]` method")),
        "{errors:#?}"
    );
}

#[test]
fn process_manager_methods_take_mut_self() {
    let errors = errors(
        Flavor::ProcessManager,
        quote!(),
        quote! {
            impl Fulfillment {
                #[handle(correlate = "order_id")]
                async fn on_placed(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
            }
        },
    );
    assert_has(
        &errors,
        "a process manager's `#[handle]` method takes `&mut self`",
    );
}

#[test]
fn an_impl_without_handlers_is_an_error() {
    let errors = errors(
        Flavor::Command,
        quote!(),
        quote!(impl Commands { fn helper(&self) {} }),
    );
    assert_has(&errors, "`#[command_handler]` found no `#[handle]` method");
}

#[test]
fn trait_impls_and_non_impls_are_rejected() {
    let errors = errors(
        Flavor::Event,
        quote!(),
        quote!(impl Display for Projector { #[handle] async fn a(&self, e: &E) {} }),
    );
    assert_has(&errors, "goes on an inherent impl");
    let errors = super::tests::errors(
        Flavor::Event,
        quote!(),
        quote!(
            struct Projector;
        ),
    );
    assert_has(&errors, "`#[event_handler]` goes on an `impl` block");
}

#[test]
fn one_message_type_per_method() {
    let errors = errors(
        Flavor::Event,
        quote!(),
        quote! {
            impl Projector {
                #[handle] async fn a(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
                #[handle] async fn b(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
            }
        },
    );
    assert_has(&errors, "`OrderPlaced` is already handled by `a`");
}

#[test]
fn sequencing_policies_are_parsed() {
    let out = expand(
        Flavor::Event,
        quote!(),
        quote! {
            #[sequencing_policy(property = "client_id")]
            impl Projector {
                #[handle]
                #[sequencing_policy(metadata = "tenant")]
                async fn a(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
                #[handle]
                #[sequencing_policy(with = ordo::contract::policy::ExtractionPolicy::new(|e: &OrderPaid| Some(e.n)))]
                async fn b(&self, event: &OrderPaid) -> anyhow::Result<()> { Ok(()) }
                #[handle]
                async fn c(&self, event: &OrderShipped) -> anyhow::Result<()> { Ok(()) }
            }
        },
    );
    assert!(compile_errors(&out).is_empty(), "{out}");
    let text = out.to_string();
    assert!(text.contains("PropertyPolicy :: new (\"client_id\")"), "{text}");
    assert!(text.contains("MetadataPolicy :: new (\"tenant\")"), "{text}");
    assert!(text.contains("ExtractionPolicy :: new"), "{text}");
    assert!(!text.contains("sequencing_policy"), "{text}");
}

#[test]
fn malformed_policies_are_reported() {
    let errors = errors(
        Flavor::Event,
        quote!(),
        quote! {
            #[sequencing_policy(per_aggregate, sequential)]
            #[sequencing_policy(sequential)]
            impl Projector {
                #[handle]
                #[sequencing_policy(random)]
                async fn a(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
                #[handle]
                #[sequencing_policy()]
                async fn b(&self, event: &OrderPaid) -> anyhow::Result<()> { Ok(()) }
                #[sequencing_policy(sequential)]
                fn helper(&self) {}
            }
        },
    );
    assert_has(
        &errors,
        "`#[sequencing_policy]` takes one policy, but `sequential` follows `per_aggregate`",
    );
    assert_has(&errors, "duplicate `#[sequencing_policy]`");
    assert_has(
        &errors,
        "unknown `#[sequencing_policy]` argument `random`; expected one of: `per_aggregate`, `sequential`, `full_concurrency`, `routing_key`, `partition_key`, `property`, `metadata`, `with`",
    );
    assert_has(&errors, "`#[sequencing_policy]` needs a policy");
    assert_has(&errors, "`#[sequencing_policy]` on a method needs `#[handle]`");
}

#[test]
fn sequential_by_and_a_policy_conflict() {
    let errors = errors(
        Flavor::Event,
        quote!(sequential_by = "client_id"),
        quote! {
            impl Projector {
                #[handle]
                #[sequencing_policy(per_aggregate)]
                async fn a(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
            }
        },
    );
    assert_has(
        &errors,
        "`sequential_by = \"client_id\"` already is this handler's sequencing policy",
    );
}

#[test]
fn crate_names_where_the_generated_code_finds_ordo() {
    for flavor in [Flavor::Event, Flavor::Command] {
        let out = expand(flavor, quote!(crate = "my_app::ordo"), projector()).to_string();
        assert!(
            out.contains("my_app :: ordo :: __private :: HandlerDescriptor"),
            "{out}"
        );
        // Every generated path goes through the given one.
        assert_eq!(
            out.matches("__private").count(),
            out.matches("my_app :: ordo :: __private").count(),
            "{out}"
        );
    }
    let errors = compile_errors(&expand(Flavor::Event, quote!(crate = "not a path"), projector()));
    assert_has(&errors, "`crate` takes the path Ordo is reachable at");
    let errors = compile_errors(&expand(
        Flavor::Event,
        quote!(crate = "a", crate = "b"),
        projector(),
    ));
    assert_has(&errors, "duplicate `crate` argument");
}

#[test]
fn name_overrides_the_handler_name() {
    for flavor in [Flavor::Event, Flavor::Command] {
        let out = expand(flavor, quote!(name = "billing.projector-2"), projector());
        assert!(compile_errors(&out).is_empty(), "{out}");
        assert!(
            out.to_string()
                .contains("HandlerDescriptor :: new (\"billing.projector-2\""),
            "{out}"
        );
    }
    let out = expand(
        Flavor::ProcessManager,
        quote!(sequential_by, name = "fulfillment_v2"),
        quote! {
            impl Fulfillment {
                #[handle(start, correlate = "order_id")]
                async fn on_placed(&mut self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
            }
        },
    );
    assert!(compile_errors(&out).is_empty(), "{out}");
    assert!(
        out.to_string()
            .contains("HandlerDescriptor :: new (\"fulfillment_v2\""),
        "{out}"
    );
    let out = expand(Flavor::Event, quote!(), projector());
    assert!(
        out.to_string()
            .contains("HandlerDescriptor :: new (\"Projector\""),
        "{out}"
    );
}

#[test]
fn names_are_checked() {
    for (name, why) in [
        (quote!(""), "`name` cannot be empty"),
        (quote!("billing:projector"), "a handler's `name` contains ':'"),
        (quote!("two words"), "a handler's `name` contains ' '"),
        (quote!("line\n"), "a handler's `name` contains '\\n'"),
        (quote!("{tag}"), "a handler's `name` contains '{'"),
        (quote!(Projector), "`name` takes a string"),
    ] {
        let errors = errors(Flavor::Event, quote!(name = #name), projector());
        assert_eq!(errors.len(), 1, "{name}: {errors:?}");
        assert_has(&errors, why);
    }
    let long = "p".repeat(101);
    let errors = errors(Flavor::Event, quote!(name = #long), projector());
    assert_has(&errors, "is 101 bytes long (at most 100)");
    let errors = errors_of_duplicate_name();
    assert_has(&errors, "duplicate `name` argument");
}

fn errors_of_duplicate_name() -> Vec<String> {
    errors(Flavor::Event, quote!(name = "a", name = "b"), projector())
}

#[test]
fn cfg_alternatives_are_not_duplicates_and_carry_their_cfg() {
    let out = expand(
        Flavor::Event,
        quote!(),
        quote! {
            impl Projector {
                #[handle]
                #[cfg(feature = "v2")]
                async fn v2(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
                #[cfg(not(feature = "v2"))]
                #[handle]
                async fn v1(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
            }
        },
    );
    assert!(compile_errors(&out).is_empty(), "{out}");
    let text = out.to_string();
    // The method, its checks, its descriptor entry and its dispatch arm.
    assert_eq!(text.matches("# [cfg (feature = \"v2\")]").count(), 4, "{text}");
    assert_eq!(
        text.matches("# [cfg (not (feature = \"v2\"))]").count(),
        4,
        "{text}"
    );

    let errors = errors(
        Flavor::Event,
        quote!(),
        quote! {
            impl Projector {
                #[handle]
                #[cfg(feature = "v2")]
                async fn a(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
                #[handle]
                #[cfg(feature = "v2")]
                async fn b(&self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
            }
        },
    );
    assert_eq!(
        errors,
        ["`OrderPlaced` is already handled by `a`: one method per message type"]
    );
}

#[test]
fn a_partitioned_process_manager_checks_correlation_per_category_at_compile_time() {
    let item = quote! {
        impl Fulfillment {
            #[handle(start, correlate = "order_id")]
            async fn on_placed(&mut self, event: &OrderPlaced) -> anyhow::Result<()> { Ok(()) }
            #[handle(correlate = "id")]
            async fn on_shipped(&mut self, event: &OrderShipped) -> anyhow::Result<()> { Ok(()) }
            #[handle(correlate = "order_id")]
            async fn on_paid(&mut self, event: &OrderPaid) -> anyhow::Result<()> { Ok(()) }
        }
    };
    let out = expand(Flavor::ProcessManager, quote!(sequential_by), item.clone()).to_string();
    // Pairs with different fields only: placed/shipped and shipped/paid.
    assert_eq!(out.matches("same_category").count(), 2, "{out}");
    assert!(
        out.contains("correlates `OrderPlaced` by `order_id` (in `on_placed`) and `OrderShipped` by `id`"),
        "{out}"
    );
    // Unpartitioned: different fields per category are allowed.
    let out = expand(Flavor::ProcessManager, quote!(), item).to_string();
    assert!(!out.contains("same_category"), "{out}");
}
