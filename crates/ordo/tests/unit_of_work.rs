//! Command handlers and process managers raise events through their
//! context; the events are committed when the handler succeeds and
//! discarded when it fails. No `OnceLock<Domain>` trick needed.

use std::sync::{Arc, Mutex};

use ordo::contract::error::CommitError;
use ordo::prelude::*;
use ordo::runtime::error::DispatchError;

#[derive(Aggregate)]
struct Account;

#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Account)]
struct OpenAccount {
    #[routing_key]
    account_id: String,
    fail_after_raising: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Account)]
struct AccountOpened {
    #[aggregate_id]
    account_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Account)]
struct WelcomeSent {
    #[aggregate_id]
    account_id: String,
}

struct AccountCommands;

#[command_handler(part_of = Account)]
impl AccountCommands {
    #[handle]
    async fn open(&self, command: &OpenAccount, ctx: &HandlerContext) -> anyhow::Result<()> {
        ctx.raise(AccountOpened {
            account_id: command.account_id.clone(),
        })?;
        anyhow::ensure!(!command.fail_after_raising, "refused after raising");
        Ok(())
    }
}

/// Sends one welcome per opened account.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Onboarding {
    welcomed: bool,
}

#[process_manager]
impl Onboarding {
    #[handle(start, correlate = "account_id")]
    async fn on_opened(&mut self, event: &AccountOpened, ctx: &HandlerContext) -> anyhow::Result<()> {
        ctx.raise(WelcomeSent {
            account_id: event.account_id.clone(),
        })?;
        self.welcomed = true;
        Ok(())
    }
}

/// Records what it sees, and whether an event handler may raise through
/// its context.
#[derive(Clone, Default)]
struct Journal {
    seen: Arc<Mutex<Vec<String>>>,
    raise_errors: Arc<Mutex<Vec<String>>>,
}

#[event_handler(part_of = Account)]
impl Journal {
    #[handle]
    async fn on_opened(&self, event: &AccountOpened, ctx: &HandlerContext) -> anyhow::Result<()> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("opened {}", event.account_id));
        if let Err(error) = ctx.raise(WelcomeSent {
            account_id: event.account_id.clone(),
        }) {
            self.raise_errors.lock().unwrap().push(error.to_string());
        }
        Ok(())
    }

    #[handle]
    async fn on_welcome(&self, event: &WelcomeSent, _ctx: &HandlerContext) -> anyhow::Result<()> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("welcomed {}", event.account_id));
        Ok(())
    }
}

fn open(account_id: &str, fail_after_raising: bool) -> OpenAccount {
    OpenAccount {
        account_id: account_id.into(),
        fail_after_raising,
    }
}

#[tokio::test]
async fn a_command_handler_raises_events_committed_with_its_success() -> anyhow::Result<()> {
    let journal = Journal::default();
    let domain = Domain::builder()
        .aggregate::<Account>()
        .command_handler(AccountCommands)
        .process_manager::<Onboarding>()
        .event_handler(journal.clone())
        .init()?;

    domain.dispatch(open("a-1", false)).await?;
    let failed = domain.dispatch(open("a-2", true)).await.unwrap_err();
    assert!(matches!(failed, DispatchError::Handler { .. }), "{failed:?}");
    domain.settle().await?;

    let mut seen = journal.seen.lock().unwrap().clone();
    seen.sort();
    // a-2's event was discarded with its failed command; the process
    // manager's event was committed with its state.
    assert_eq!(seen, ["opened a-1", "welcomed a-1"]);
    assert!(domain.outbox().pending(10).await?.is_empty());
    let raise_errors = journal.raise_errors.lock().unwrap().clone();
    assert_eq!(raise_errors.len(), 1);
    assert!(
        raise_errors[0].contains("no open unit of work"),
        "{raise_errors:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_bad_key_raised_by_a_command_handler_fails_the_command() -> anyhow::Result<()> {
    #[derive(Debug, Clone, Serialize, Deserialize, Event)]
    #[event(part_of = Account)]
    struct Deposited {
        account_id: String,
    }

    struct Bank;

    #[command_handler(part_of = Account)]
    impl Bank {
        #[handle]
        async fn open(&self, command: &OpenAccount, ctx: &HandlerContext) -> anyhow::Result<()> {
            // A key with ':' cannot name a partition stream.
            ctx.raise(Deposited {
                account_id: format!("{}:savings", command.account_id),
            })?;
            Ok(())
        }
    }

    struct Ledger;

    #[event_handler(part_of = Account, sequential_by = "account_id")]
    impl Ledger {
        #[handle]
        async fn on_deposit(&self, _event: &Deposited, _ctx: &HandlerContext) -> anyhow::Result<()> {
            Ok(())
        }
    }

    let domain = Domain::builder()
        .command_handler(Bank)
        .event_handler(Ledger)
        .init()?;
    let error = domain.dispatch(open("acct-1", false)).await.unwrap_err();
    assert!(
        matches!(&error, DispatchError::Commit { error, .. } if matches!(**error, CommitError::InvalidKey { .. })),
        "{error:?}"
    );
    assert!(domain.outbox().pending(10).await?.is_empty());
    Ok(())
}

/// A publisher (or a relay) built from types: registering the handler's
/// type gives each category its key, with no instance of the handler, so
/// none of its dependencies (here one that cannot even be made); nothing
/// consumes in this process.
mod publisher_from_types {
    use ordo::Config;
    use ordo::contract::error::CommitError;
    use ordo::prelude::*;

    #[derive(Aggregate)]
    struct Parcel;

    #[derive(Debug, Clone, Serialize, Deserialize, Event)]
    #[event(part_of = Parcel)]
    struct ParcelScanned {
        parcel: String,
        depot: String,
    }

    /// Needs what a publisher has not got: no value of it can exist.
    struct ParcelTracker {
        _database: std::convert::Infallible,
    }

    #[event_handler(part_of = Parcel, sequential_by = "depot")]
    impl ParcelTracker {
        #[handle]
        async fn on_scanned(&self, _event: &ParcelScanned) -> anyhow::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_publisher_registers_handler_types_without_instances() -> anyhow::Result<()> {
        let domain = Domain::builder()
            .aggregate::<Parcel>()
            .event_handler_type::<ParcelTracker>()
            // The workers' [handlers.NAME] tables are accepted: the name is known.
            .config(Config::from_toml_str(
                "[handlers.ParcelTracker]\nmax_retries = 1\n",
            )?)
            .init()?;
        assert!(domain.subscriptions().is_empty(), "nothing consumes here");
        assert_eq!(domain.partitioned_categories(), [("parcel", "depot")]);

        // The key rule holds at commit: a bad key fails the commit.
        let mut uow = domain.unit_of_work();
        uow.raise(ParcelScanned {
            parcel: "p-1".into(),
            depot: String::new(),
        })?;
        let error = uow.commit().await.expect_err("an empty key is refused");
        assert!(matches!(error, CommitError::InvalidKey { .. }), "{error:?}");

        let mut uow = domain.unit_of_work();
        uow.raise(ParcelScanned {
            parcel: "p-1".into(),
            depot: "d-7".into(),
        })?;
        uow.commit().await?;
        let rows = domain.outbox().pending(10).await?;
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].partition_key.as_deref(), Some("d-7"));
        Ok(())
    }

    /// The start-up checks see the type as they see an instance: two
    /// handlers keying one category differently are refused.
    #[test]
    fn a_handler_type_takes_part_in_the_start_up_checks() {
        struct OtherTracker;

        #[event_handler(part_of = Parcel, sequential_by = "parcel")]
        impl OtherTracker {
            #[handle]
            async fn on_scanned(&self, _event: &ParcelScanned) -> anyhow::Result<()> {
                Ok(())
            }
        }

        let error = Domain::builder()
            .event_handler_type::<ParcelTracker>()
            .event_handler(OtherTracker)
            .init()
            .expect_err("two keys for one category");
        assert!(error.to_string().contains("depot"), "{error}");
    }
}
