//! Building a domain: the registry of aggregates and handlers, checked at
//! [`DomainBuilder::init`].

use std::any::TypeId;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use crate::contract::broker::{Broker, HandlerSettings, Subscription};
use crate::contract::command::command_category;
use crate::contract::config::{Config, HandlerConfig};
use crate::contract::handler::{
    BoxFuture, CommandHandler, DynHandler, EventHandler, HandlerContext, HandlerDescriptor, HandlerKind,
    HandlerResult, ProcessManager,
};
use crate::contract::message::{Aggregate, Envelope};
use crate::contract::outbox::{InMemoryOutbox, Outbox};
use crate::contract::policy::{
    PartitionKeyPolicy, SequencingPolicy, default_command_policy, default_event_policy,
};
use crate::contract::process::{CorrelationPolicy, InMemoryProcessStore, ProcessStore};
use crate::runtime::bus::CommandBus;
use crate::runtime::dispatch::CommandRun;
use crate::runtime::domain::{Domain, DomainRef, Inner};
use crate::runtime::error::{IncorrectUsageError, UsageProblem};
use crate::runtime::inline::InlineBroker;
use crate::runtime::outbox::OutboxProcessor;
use crate::runtime::process_manager::ProcessManagerHandler;
use crate::runtime::registry::{self, AggregateInfo};

impl Domain {
    /// Starts registering a domain.
    pub fn builder() -> DomainBuilder {
        DomainBuilder::new()
    }
}

/// Registers aggregates, handlers and infrastructure, then checks them all
/// with [`DomainBuilder::init`].
///
/// Defaults: the [`InlineBroker`], an [`InMemoryOutbox`], the broker's
/// process store (an [`InMemoryProcessStore`] for the inline broker) and
/// [`Config::default`].
///
/// Registering aggregates is optional (messages name their categories
/// themselves). Once at least one is registered, every category a handler
/// consumes must belong to a registered aggregate, which catches a handler
/// wired to a category the domain does not own.
#[must_use = "a builder does nothing until `init()` is called"]
pub struct DomainBuilder {
    aggregates: Vec<AggregateInfo>,
    registrations: Vec<Registration>,
    broker: Option<(Arc<dyn Broker>, Option<InlineBroker>)>,
    outbox: Option<Arc<dyn Outbox>>,
    process_store: Option<Arc<dyn ProcessStore>>,
    config: Option<Config>,
    /// `handler_settings` calls, by handler name (they override the file's).
    handler_settings: BTreeMap<String, HandlerConfig>,
}

/// A registered handler, before `init()` turns it into a subscription.
struct Registration {
    descriptor: HandlerDescriptor,
    policy: Option<Arc<dyn SequencingPolicy>>,
    handler: HandlerFactory,
}

/// Process managers need the process store, known only at `init()`.
enum HandlerFactory {
    Ready(Arc<dyn DynHandler>),
    ProcessManager(MakeProcessManager),
    /// Registered by type for its keys and name (a publisher, a relay):
    /// handled in other processes, never here.
    Elsewhere,
}

/// Builds a process manager's handler from its descriptor, the store and
/// the domain it runs in (set once `init()` has built it).
type MakeProcessManager = fn(Arc<HandlerDescriptor>, Arc<dyn ProcessStore>, DomainRef) -> Arc<dyn DynHandler>;

impl DomainBuilder {
    fn new() -> Self {
        Self {
            aggregates: Vec::new(),
            registrations: Vec::new(),
            broker: None,
            outbox: None,
            process_store: None,
            config: None,
            handler_settings: BTreeMap::new(),
        }
    }

    /// Registers aggregate `A` (see the type's documentation for what it
    /// enables).
    pub fn aggregate<A: Aggregate>(mut self) -> Self {
        self.aggregates.push(AggregateInfo {
            type_id: TypeId::of::<A>(),
            type_name: std::any::type_name::<A>(),
            category: A::CATEGORY,
        });
        self
    }

    /// Registers an event handler with its declared sequencing policy.
    pub fn event_handler<H: EventHandler>(self, handler: H) -> Self {
        self.register(H::descriptor(), None, Arc::new(EventHandlerAdapter(handler)))
    }

    /// Registers event handler type `H` without an instance, for what a
    /// process that publishes needs from it: the partition key of each
    /// category it handles (its `sequential_by` and typed key extractors),
    /// its name (for `[handlers.NAME]`), and the start-up checks. Its
    /// messages are handled by the processes that register an instance
    /// ([`DomainBuilder::event_handler`]), never by this one: nothing of
    /// `H` runs here, so its dependencies (a database pool, clients) are not
    /// needed to build a publisher or a relay.
    ///
    /// ```ignore
    /// # use ordo::prelude::*;
    /// # #[derive(Aggregate)] struct Order;
    /// # #[derive(Debug, Clone, Serialize, Deserialize, Event)]
    /// # #[event(part_of = Order)]
    /// # struct OrderPlaced { order_id: String, client_id: String }
    /// struct OrderProjector { /* a pool, a client... */ }
    ///
    /// #[event_handler(part_of = Order, sequential_by = "client_id")]
    /// impl OrderProjector {
    ///     #[handle]
    ///     async fn on_placed(&self, event: &OrderPlaced) -> anyhow::Result<()> {
    ///         Ok(())
    ///     }
    /// }
    ///
    /// // A publisher: the handler's type, no instance.
    /// let domain = Domain::builder()
    ///     .aggregate::<Order>()
    ///     .event_handler_type::<OrderProjector>()
    ///     .init()?;
    /// assert_eq!(domain.partition_key_field("order"), Some("client_id"));
    /// assert!(domain.subscriptions().is_empty());
    /// # Ok::<(), ordo::runtime::error::IncorrectUsageError>(())
    /// ```
    pub fn event_handler_type<H: EventHandler>(mut self) -> Self {
        self.registrations.push(Registration {
            descriptor: H::descriptor(),
            policy: None,
            handler: HandlerFactory::Elsewhere,
        });
        self
    }

    /// Registers an event handler sequenced by `policy`, which overrides
    /// its `#[sequencing_policy]` attributes and `sequential_by` in process.
    pub fn event_handler_with_policy<H: EventHandler>(
        self,
        handler: H,
        policy: impl SequencingPolicy,
    ) -> Self {
        self.register(
            H::descriptor(),
            Some(Arc::new(policy)),
            Arc::new(EventHandlerAdapter(handler)),
        )
    }

    /// Registers a command handler with its declared sequencing policy
    /// (by default, the routing key).
    pub fn command_handler<H: CommandHandler>(self, handler: H) -> Self {
        self.register(H::descriptor(), None, Arc::new(CommandHandlerAdapter(handler)))
    }

    /// Registers a command handler sequenced by `policy`, which overrides its
    /// `#[sequencing_policy]` attributes and `sequential_by`.
    pub fn command_handler_with_policy<H: CommandHandler>(
        self,
        handler: H,
        policy: impl SequencingPolicy,
    ) -> Self {
        self.register(
            H::descriptor(),
            Some(Arc::new(policy)),
            Arc::new(CommandHandlerAdapter(handler)),
        )
    }

    /// Registers command handler `H` by type: another instance runs it.
    /// On a broker that routes commands (Redis) this process can then send
    /// `H`'s commands ([`Domain::send`](crate::Domain::send)) to the
    /// instance that owns each command's key; on other brokers sending one
    /// fails with [`DispatchError::NoHandler`](crate::DispatchError::NoHandler).
    pub fn command_handler_type<H: CommandHandler>(mut self) -> Self {
        self.registrations.push(Registration {
            descriptor: H::descriptor(),
            policy: None,
            handler: HandlerFactory::Elsewhere,
        });
        self
    }

    /// Registers process manager `P`. Its messages are always sequenced by
    /// correlation value, so one instance never handles two at once.
    pub fn process_manager<P: ProcessManager>(mut self) -> Self {
        self.registrations.push(Registration {
            descriptor: P::descriptor(),
            policy: None,
            handler: HandlerFactory::ProcessManager(process_manager_handler::<P>),
        });
        self
    }

    /// Sets the broker (default: an [`InlineBroker`] built from the config).
    pub fn broker<B: Broker>(mut self, broker: B) -> Self {
        let inline = InlineBroker::behind(&broker);
        self.broker = Some((Arc::new(broker), inline));
        self
    }

    /// Sets the outbox (default: an [`InMemoryOutbox`]).
    pub fn outbox<O: Outbox>(mut self, outbox: O) -> Self {
        self.outbox = Some(Arc::new(outbox));
        self
    }

    /// Sets the process store (default: the broker's
    /// [`Broker::process_store`], such as the Redis broker's store, else an
    /// [`InMemoryProcessStore`]).
    pub fn process_store<S: ProcessStore>(mut self, store: S) -> Self {
        self.process_store = Some(Arc::new(store));
        self
    }

    /// Sets the configuration (default: the broker's [`Broker::config`],
    /// such as the one the Redis broker was built with, else
    /// [`Config::default`]). `init()` refuses a configuration that differs
    /// from the broker's.
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Sets handler `name`'s own retries, backoff and concurrency. They
    /// override the `[handlers.NAME]` table of the configuration setting by
    /// setting, which overrides `[server.partitioning]`. `init()` rejects a
    /// name that no registered event handler or process manager has.
    pub fn handler_settings(mut self, name: impl Into<String>, settings: HandlerConfig) -> Self {
        let name = name.into();
        let merged = self
            .handler_settings
            .get(&name)
            .map_or_else(|| settings.clone(), |earlier| earlier.overridden_by(&settings));
        self.handler_settings.insert(name, merged);
        self
    }

    fn register(
        mut self,
        descriptor: HandlerDescriptor,
        policy: Option<Arc<dyn SequencingPolicy>>,
        handler: Arc<dyn DynHandler>,
    ) -> Self {
        self.registrations.push(Registration {
            descriptor,
            policy,
            handler: HandlerFactory::Ready(handler),
        });
        self
    }

    /// Checks the registrations and builds the domain.
    ///
    /// Reports every problem at once: handlers partitioning one category by
    /// different keys, partitioned handlers on a broker that can honour
    /// neither stream partitioning nor in-process ordering, a type name used
    /// by two types, a handler name registered twice, a command with two
    /// handlers, a handler consuming another aggregate's messages, an
    /// unregistered category (once aggregates are registered), a partitioned
    /// handler without a key field, a process manager with a sequencing
    /// policy, a key of `[server.partitioning]` that neither ordo-core nor
    /// the broker reads, a `[categories.NAME] partitions` setting the
    /// category or the broker cannot have.
    pub fn init(self) -> Result<Domain, IncorrectUsageError> {
        let broker_config = self.broker.as_ref().and_then(|(broker, _)| broker.config());
        let config = match (self.config, broker_config) {
            (Some(domain), Some(broker)) if domain != broker => {
                let broker = self.broker.as_ref().map_or("", |(b, _)| b.name()).to_owned();
                return Err(IncorrectUsageError::new(vec![UsageProblem::ConfigMismatch {
                    broker,
                }]));
            }
            (Some(config), _) | (None, Some(config)) => config,
            (None, None) => Config::default(),
        };
        let (broker, inline) = self.broker.unwrap_or_else(|| {
            let inline = InlineBroker::with_config(&config);
            (Arc::new(inline.clone()), Some(inline))
        });
        let descriptors: Vec<&HandlerDescriptor> = self.registrations.iter().map(|r| &r.descriptor).collect();
        let unread_key = config
            .unknown_partitioning_key(broker.partitioning_keys())
            .map(|(key, valid)| UsageProblem::UnknownConfigKey {
                key,
                broker: broker.name().to_owned(),
                valid,
            });
        let partitioning = match registry::check(
            &descriptors,
            &self.aggregates,
            broker.name(),
            broker.capabilities(),
        ) {
            Ok(partitioning) => match unread_key {
                None => partitioning,
                Some(problem) => return Err(IncorrectUsageError::new(vec![problem])),
            },
            Err(problems) => {
                return Err(IncorrectUsageError::new(
                    unread_key.into_iter().chain(problems).collect(),
                ));
            }
        };
        let problems = registry::check_partitions(
            &config,
            &partitioning,
            &descriptors,
            broker.name(),
            broker.capabilities(),
        );
        if !problems.is_empty() {
            return Err(IncorrectUsageError::new(problems));
        }
        let handler_settings = resolve_handler_settings(&config, &self.handler_settings, &descriptors)?;
        let message_types = registry::message_types(&descriptors);
        let aggregate_categories = self.aggregates.iter().map(|a| a.category).collect();

        let process_store = self
            .process_store
            .or_else(|| broker.process_store())
            .unwrap_or_else(|| Arc::new(InMemoryProcessStore::new()));
        let domain_ref = DomainRef::default();
        let mut elsewhere = Vec::new();
        let (commands, consumers): (Vec<_>, Vec<_>) = self
            .registrations
            .into_iter()
            .filter_map(|registration| {
                let settings = handler_settings
                    .get(registration.descriptor.name)
                    .cloned()
                    .unwrap_or_default();
                if registration.descriptor.kind == HandlerKind::Command
                    && matches!(registration.handler, HandlerFactory::Elsewhere)
                {
                    let registration = Registration {
                        handler: HandlerFactory::Ready(Arc::new(RunsElsewhere)),
                        ..registration
                    };
                    elsewhere.extend(subscription(registration, &process_store, &domain_ref, settings));
                    return None;
                }
                subscription(registration, &process_store, &domain_ref, settings)
            })
            .partition(|s| s.kind() == HandlerKind::Command);
        let router = broker.command_router();
        // On a broker that routes commands, its consumer runs the command
        // handlers on the command stream categories.
        let routed_commands: Arc<[Subscription]> = if router.is_some() {
            routed_commands(&commands, &domain_ref).into()
        } else {
            Arc::new([])
        };
        let subscriptions: Arc<[Subscription]> = consumers.into();
        if let Some(inline) = &inline {
            inline.attach(Arc::clone(&subscriptions));
        }

        let outbox = self.outbox.unwrap_or_else(|| Arc::new(InMemoryOutbox::new()));
        let keyed_categories = partitioning
            .iter()
            .map(|(category, key)| (*category, key.field()));
        let processor = OutboxProcessor::new(Arc::clone(&outbox), Arc::clone(&broker), &config)
            .with_partitioned_categories(keyed_categories);
        let bus = CommandBus::new(
            &commands,
            &elsewhere,
            config.key_rules(),
            config.partitioning().max_concurrency(),
        );
        let domain = Domain::new(Inner {
            config,
            broker,
            inline,
            outbox,
            process_store,
            subscriptions,
            command_handlers: commands.into(),
            routed_commands,
            router,
            partitioning,
            message_types,
            aggregate_categories,
            processor: Arc::new(processor),
            bus,
        });
        domain_ref.set(&domain);
        Ok(domain)
    }
}

impl fmt::Debug for DomainBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let handlers: Vec<&str> = self.registrations.iter().map(|r| r.descriptor.name).collect();
        f.debug_struct("DomainBuilder")
            .field("aggregates", &self.aggregates)
            .field("handlers", &handlers)
            .field("broker", &self.broker.as_ref().map(|(b, _)| b.name()))
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Builds the subscription of a registration (none for a handler handled
/// elsewhere, registered by type), resolving its policy:
/// registration override, else the impl's `#[sequencing_policy]`, else
/// `sequential_by` (the validated partition key), else the kind's default.
/// A process manager is always sequenced by correlation value.
fn subscription(
    registration: Registration,
    store: &Arc<dyn ProcessStore>,
    domain: &DomainRef,
    settings: HandlerConfig,
) -> Option<Subscription> {
    let descriptor = Arc::new(registration.descriptor);
    let handler = match registration.handler {
        HandlerFactory::Ready(handler) => handler,
        HandlerFactory::ProcessManager(make) => {
            make(Arc::clone(&descriptor), Arc::clone(store), domain.clone())
        }
        // Handled in other processes: nothing consumes for it here.
        HandlerFactory::Elsewhere => return None,
    };
    let (policy, policy_overridden): (Arc<dyn SequencingPolicy>, bool) =
        match (registration.policy, descriptor.kind) {
            (_, HandlerKind::ProcessManager) => {
                (Arc::new(CorrelationPolicy::new(Arc::clone(&descriptor))), true)
            }
            (Some(policy), _) => (policy, true),
            (None, kind) => {
                let declared = descriptor.policy.clone();
                let policy = declared.unwrap_or_else(|| match kind {
                    _ if descriptor.partitioned => Arc::new(PartitionKeyPolicy),
                    HandlerKind::Command => default_command_policy(),
                    _ => default_event_policy(),
                });
                (policy, false)
            }
        };
    Some(Subscription {
        descriptor,
        policy,
        policy_overridden,
        handler,
        settings: HandlerSettings::new(settings),
    })
}

/// The handler of a command handler registered by type: another instance
/// runs it, never this one.
struct RunsElsewhere;

impl DynHandler for RunsElsewhere {
    fn handle<'a>(&'a self, message: &'a Envelope, _: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        let text = format!(
            "the command handler of `{}` was registered by type: it runs on other instances",
            message.type_name
        );
        Box::pin(async move { Err(text.into()) })
    }
}

/// The name of the consumer group of a command stream category: one group
/// runs every command handler of the aggregate, so commands of one key run
/// one at a time whichever handler handles them.
pub const COMMANDS_GROUP: &str = "commands";

/// The subscriptions a routing broker consumes for the command handlers
/// `commands`: one per aggregate category, on its command stream category
/// ([`command_category`]), each partition one sequence, run by a
/// [`CommandRun`] of the aggregate's handlers.
fn routed_commands(commands: &[Subscription], domain: &DomainRef) -> Vec<Subscription> {
    let mut by_category: BTreeMap<&'static str, Vec<&Subscription>> = BTreeMap::new();
    for s in commands {
        for category in s.categories() {
            by_category.entry(category).or_default().push(s);
        }
    }
    by_category
        .into_iter()
        .map(|(category, handlers)| {
            let stream = intern(command_category(category));
            let handles = handlers
                .iter()
                .flat_map(|s| s.descriptor.handles.iter())
                .filter(|handled| handled.category == category)
                .map(|handled| {
                    let mut handled = handled.clone();
                    handled.category = stream;
                    handled.key = None;
                    handled.policy = None;
                    handled
                })
                .collect();
            let descriptor = HandlerDescriptor::new(COMMANDS_GROUP, HandlerKind::Command, handles)
                .with_part_of(Some(category))
                .with_partitioned(true);
            let run: Vec<_> = handlers
                .iter()
                .map(|s| (Arc::clone(&s.handler), Arc::clone(&s.descriptor)))
                .collect();
            Subscription {
                descriptor: Arc::new(descriptor),
                policy: Arc::new(PartitionKeyPolicy),
                policy_overridden: true,
                handler: Arc::new(CommandRun::new(COMMANDS_GROUP, &run, domain.clone())),
                settings: HandlerSettings::default(),
            }
        })
        .collect()
}

/// `name` as a `&'static str`, leaked once per distinct name (command
/// stream categories: one per aggregate with command handlers).
fn intern(name: String) -> &'static str {
    static NAMES: std::sync::Mutex<BTreeSet<&'static str>> = std::sync::Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = names.get(name.as_str()) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.insert(leaked);
    leaked
}

/// Each handler's own settings: the configuration's `[handlers.NAME]`
/// overridden by the builder's; a name that is not a registered consumer is
/// an error.
fn resolve_handler_settings(
    config: &Config,
    builder: &BTreeMap<String, HandlerConfig>,
    descriptors: &[&HandlerDescriptor],
) -> Result<BTreeMap<String, HandlerConfig>, IncorrectUsageError> {
    let mut merged = config.handlers().clone();
    for (name, settings) in builder {
        let entry = merged.entry(name.clone()).or_default();
        *entry = entry.overridden_by(settings);
    }
    let consumers: Vec<&'static str> = descriptors
        .iter()
        .filter(|d| d.kind != HandlerKind::Command)
        .map(|d| d.name)
        .collect();
    let mut problems: Vec<UsageProblem> = merged
        .keys()
        .filter(|name| !consumers.contains(&name.as_str()))
        .map(|name| {
            match descriptors
                .iter()
                .find(|d| d.name == name && d.kind == HandlerKind::Command)
            {
                Some(command) => UsageProblem::CommandHandlerSettings {
                    handler: command.name,
                },
                None => UsageProblem::UnknownHandlerSettings {
                    name: name.clone(),
                    registered: consumers.clone(),
                },
            }
        })
        .collect();
    problems.extend(merged.iter().filter_map(|(name, settings)| {
        let window = settings.ack_window().filter(|w| *w > 0)?;
        let descriptor = descriptors.iter().find(|d| d.name == name)?;
        let reason = ack_window_problem(config, descriptor, window)?;
        Some(UsageProblem::AckWindow {
            handler: name.clone(),
            window,
            reason,
        })
    }));
    if problems.is_empty() {
        Ok(merged)
    } else {
        Err(IncorrectUsageError::new(problems))
    }
}

/// Why `ack_window = window` cannot apply to `descriptor`, if it cannot:
/// the window runs a key's messages ahead of their acknowledgements, which
/// only a `sequential_by` event handler on per-key partitions does.
fn ack_window_problem(config: &Config, descriptor: &HandlerDescriptor, window: u32) -> Option<String> {
    use crate::contract::config::{MAX_ACK_WINDOW, Partitions};
    if window > MAX_ACK_WINDOW {
        return Some(format!("the largest window is {MAX_ACK_WINDOW}"));
    }
    if descriptor.kind != HandlerKind::Event {
        return Some(
            "it applies to event handlers only (a process manager saves its state message by message)"
                .to_owned(),
        );
    }
    if !descriptor.partitioned {
        return Some("it applies to `sequential_by` handlers only (a handler without a key has no order to keep ahead of)".to_owned());
    }
    let hashed = descriptor.handles.iter().find(|h| {
        config
            .categories()
            .get(h.category)
            .is_some_and(|p| matches!(p, Partitions::Hashed(_)))
    })?;
    Some(format!(
        "it consumes category `{}`, whose `[categories.{}] partitions` are hashed; the window applies to per-key partitions",
        hashed.category, hashed.category
    ))
}

fn process_manager_handler<P: ProcessManager>(
    descriptor: Arc<HandlerDescriptor>,
    store: Arc<dyn ProcessStore>,
    domain: DomainRef,
) -> Arc<dyn DynHandler> {
    Arc::new(ProcessManagerHandler::<P>::new(descriptor, store).with_domain(domain))
}

struct EventHandlerAdapter<H>(H);

impl<H: EventHandler> DynHandler for EventHandlerAdapter<H> {
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        self.0.handle(message, ctx)
    }
}

struct CommandHandlerAdapter<H>(H);

impl<H: CommandHandler> DynHandler for CommandHandlerAdapter<H> {
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        self.0.handle(message, ctx)
    }
}
