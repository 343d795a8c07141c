//! Commands across instances: a command runs on the instance that owns its
//! routing key's command partition, one at a time per key whichever
//! instance sent it, and its sender gets the outcome.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ordo::prelude::*;
use ordo_core::contract::command::FailureKind;
use ordo_redis::RedisBroker;

use common::config;
use common::topology::TestRedis;

#[derive(Aggregate)]
struct Cart;

#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Cart)]
struct AddItem {
    #[routing_key]
    cart_id: String,
    sender: String,
    seq: u32,
    /// `panic`, `fail`, or anything else to succeed.
    behaviour: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Cart)]
struct EmptyCart {
    #[routing_key]
    cart_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Added {
    cart_id: String,
    seq: u32,
    /// How many times this handler ran so far, over every key.
    runs: u32,
}

/// What the handler saw, shared by every instance of the test process.
#[derive(Debug, Default)]
struct Journal {
    /// Per key, the (sender, seq) in the order they ran.
    ran: Mutex<HashMap<String, Vec<(String, u32)>>>,
    /// Per key, runs in progress.
    running: Mutex<HashMap<String, u32>>,
    overlaps: AtomicU32,
    runs: AtomicU32,
}

#[derive(Clone)]
struct Carts {
    journal: Arc<Journal>,
    delay: Duration,
}

#[command_handler(part_of = Cart)]
impl Carts {
    #[handle]
    async fn add(&self, command: &AddItem) -> anyhow::Result<Added> {
        match command.behaviour.as_str() {
            "panic" => panic!("the cart {} exploded", command.cart_id),
            "fail" => anyhow::bail!("item {} is out of stock", command.seq),
            _ => {}
        }
        let slow = command.behaviour == "slow";
        {
            let mut running = self.journal.running.lock().unwrap();
            let now = running.entry(command.cart_id.clone()).or_default();
            *now += 1;
            if *now > 1 {
                self.journal.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
        tokio::time::sleep(if slow {
            Duration::from_millis(500)
        } else {
            self.delay
        })
        .await;
        self.journal
            .ran
            .lock()
            .unwrap()
            .entry(command.cart_id.clone())
            .or_default()
            .push((command.sender.clone(), command.seq));
        *self
            .journal
            .running
            .lock()
            .unwrap()
            .get_mut(&command.cart_id)
            .unwrap() -= 1;
        let runs = self.journal.runs.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Added {
            cart_id: command.cart_id.clone(),
            seq: command.seq,
            runs,
        })
    }
}

/// `AddItem` as a newer version sends it: its `seq` became text.
#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Cart, name = "AddItem")]
struct AddItemV2 {
    #[routing_key]
    cart_id: String,
    sender: String,
    seq: String,
    behaviour: String,
}

/// A newer version of the handler: `AddItem` changed, and it also handles
/// `EmptyCart`.
struct NewCarts;

#[command_handler(part_of = Cart)]
impl NewCarts {
    #[handle]
    async fn add(&self, _command: &AddItemV2) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle]
    async fn empty(&self, _command: &EmptyCart) -> anyhow::Result<()> {
        Ok(())
    }
}

fn add(cart: &str, sender: &str, seq: u32, behaviour: &str) -> AddItem {
    AddItem {
        cart_id: cart.into(),
        sender: sender.into(),
        seq,
        behaviour: behaviour.into(),
    }
}

async fn instance(url: &str, id: &str) -> anyhow::Result<RedisBroker> {
    Ok(RedisBroker::builder(url)
        .config(config(3_000, 3_600_000, 0))
        .instance_id(id)
        .build()
        .await?)
}

/// A domain on its own broker instance running `Carts` with `journal`.
async fn worker(url: &str, id: &str, journal: &Arc<Journal>, delay: Duration) -> anyhow::Result<Domain> {
    Ok(Domain::builder()
        .aggregate::<Cart>()
        .command_handler(Carts {
            journal: Arc::clone(journal),
            delay,
        })
        .broker(instance(url, id).await?)
        .config(config(3_000, 3_600_000, 0))
        .init()?)
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    commands_of_one_key_run_one_at_a_time_in_send_order_whichever_instance_sent_them
);

async fn commands_of_one_key_run_one_at_a_time_in_send_order_whichever_instance_sent_them(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let journal = Arc::new(Journal::default());
    let a = worker(&url, "cmd-a", &journal, Duration::from_millis(2)).await?;
    let b = worker(&url, "cmd-b", &journal, Duration::from_millis(2)).await?;
    let running_a = a.start();
    let running_b = b.start();
    let carts = ["c-1", "c-2", "c-3"];
    let mut senders = Vec::new();
    for (name, domain) in [("a", a.clone()), ("b", b.clone())] {
        for cart in carts {
            let domain = domain.clone();
            senders.push(tokio::spawn(async move {
                for seq in 1..=15 {
                    let added: Added = domain.send(add(cart, name, seq, "ok")).await?;
                    anyhow::ensure!(added.cart_id == cart && added.seq == seq, "wrong reply {added:?}");
                }
                anyhow::Ok(())
            }));
        }
    }
    for sender in senders {
        sender.await??;
    }
    assert_eq!(
        journal.overlaps.load(Ordering::SeqCst),
        0,
        "two commands of one key ran at once"
    );
    let ran = journal.ran.lock().unwrap().clone();
    for cart in carts {
        let runs = &ran[cart];
        assert_eq!(runs.len(), 30, "{cart}: every command ran once: {runs:?}");
        for sender in ["a", "b"] {
            let seqs: Vec<u32> = runs
                .iter()
                .filter(|(s, _)| s == sender)
                .map(|(_, q)| *q)
                .collect();
            assert_eq!(
                seqs,
                (1..=15).collect::<Vec<_>>(),
                "{cart}: {sender}'s commands in send order"
            );
        }
    }
    running_a.shutdown().await?;
    running_b.shutdown().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_resend_with_the_same_id_gets_the_first_outcome_without_a_second_run
);

async fn a_resend_with_the_same_id_gets_the_first_outcome_without_a_second_run(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let journal = Arc::new(Journal::default());
    let owner = worker(&url, "dedup-owner", &journal, Duration::ZERO).await?;
    let running = owner.start();
    // A sender that runs nothing: the handler registered by type.
    let sender = Domain::builder()
        .aggregate::<Cart>()
        .command_handler_type::<Carts>()
        .broker(instance(&url, "dedup-sender").await?)
        .config(config(3_000, 3_600_000, 0))
        .init()?;
    let options = SendOptions::new().id("add-1-once");
    let first: Added = sender
        .send_with(add("c-9", "s", 1, "ok"), options.clone())
        .await?;
    let again: Added = sender
        .send_with(add("c-9", "s", 1, "ok"), options.clone())
        .await?;
    let from_owner: Added = owner.send_with(add("c-9", "s", 1, "ok"), options).await?;
    assert_eq!(first, again);
    assert_eq!(first, from_owner);
    assert_eq!(journal.runs.load(Ordering::SeqCst), 1, "the command ran once");
    running.shutdown().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    bad_commands_get_a_typed_error_and_never_halt_their_key
);

async fn bad_commands_get_a_typed_error_and_never_halt_their_key(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let journal = Arc::new(Journal::default());
    let owner = worker(&url, "bad-owner", &journal, Duration::ZERO).await?;
    let running = owner.start();
    // A newer version deployed beside it, sending a command type the owner
    // does not know.
    let newer = Domain::builder()
        .aggregate::<Cart>()
        .command_handler_type::<NewCarts>()
        .broker(instance(&url, "bad-newer").await?)
        .config(config(3_000, 3_600_000, 0))
        .init()?;

    let panicked = newer
        .send::<_, Added>(add("c-5", "n", 1, "panic"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            panicked,
            ordo_core::DispatchError::Rejected {
                kind: FailureKind::Panicked,
                ..
            }
        ),
        "{panicked:?}"
    );
    assert!(
        panicked.to_string().contains("the cart c-5 exploded"),
        "{panicked}"
    );

    let failed = newer
        .send::<_, Added>(add("c-5", "n", 2, "fail"))
        .await
        .unwrap_err();
    assert!(
        matches!(failed, ordo_core::DispatchError::Handler { .. }),
        "{failed:?}"
    );
    assert!(failed.to_string().contains("item 2 is out of stock"), "{failed}");

    let unknown = newer
        .send::<_, ()>(EmptyCart {
            cart_id: "c-5".into(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            unknown,
            ordo_core::DispatchError::Rejected {
                kind: FailureKind::UnknownType,
                ..
            }
        ),
        "{unknown:?}"
    );
    assert!(unknown.to_string().contains("EmptyCart"), "{unknown}");

    let undecodable = newer
        .send::<_, ()>(AddItemV2 {
            cart_id: "c-5".into(),
            sender: "n".into(),
            seq: "three".into(),
            behaviour: "ok".into(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            undecodable,
            ordo_core::DispatchError::Rejected {
                kind: FailureKind::Undecodable,
                ..
            }
        ),
        "{undecodable:?}"
    );
    assert!(undecodable.to_string().contains("AddItem"), "{undecodable}");

    // The key did not halt: the next command runs.
    let added: Added = owner.send(add("c-5", "o", 3, "ok")).await?;
    assert_eq!(added.seq, 3);
    running.shutdown().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    with_no_instance_running_the_handler_a_send_times_out_naming_it
);

async fn with_no_instance_running_the_handler_a_send_times_out_naming_it(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let sender = Domain::builder()
        .aggregate::<Cart>()
        .command_handler_type::<Carts>()
        .broker(instance(&url, "lonely-sender").await?)
        .config(config(3_000, 3_600_000, 0))
        .init()?;
    let started = std::time::Instant::now();
    let timed_out = sender
        .send_with::<_, Added>(
            add("c-1", "s", 1, "ok"),
            SendOptions::new().timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(timed_out, ordo_core::DispatchError::Timeout { .. }),
        "{timed_out:?}"
    );
    let text = timed_out.to_string();
    assert!(text.contains("Carts") && text.contains("may still run"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // An invalid routing key fails before anything is sent.
    let invalid = sender
        .send::<_, Added>(add("c:1", "s", 1, "ok"))
        .await
        .unwrap_err();
    assert!(
        matches!(invalid, ordo_core::DispatchError::InvalidKey { .. }),
        "{invalid:?}"
    );
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    the_recorded_outcome_of_an_id_is_the_one_every_sender_gets
);

/// Conformance with the commands model of ordo-model (`one_outcome`): an
/// outcome recorded under an id is what a send of that id returns, and the
/// owner never records a second one (`SET NX`): a run of the id after the
/// record (the model's stale owner) pushes the recorded outcome, not its own.
async fn the_recorded_outcome_of_an_id_is_the_one_every_sender_gets(redis: TestRedis) -> anyhow::Result<()> {
    use fred::interfaces::KeysInterface;
    let url = redis.url();
    let journal = Arc::new(Journal::default());
    let owner = worker(&url, "recorded-owner", &journal, Duration::ZERO).await?;
    let running = owner.start();
    let recorded = r#"{"outcome":"succeeded","value":{"cart_id":"c-7","seq":99,"runs":0}}"#;
    let client = common::pool(&url).await?;
    let key = ordo_redis::PartitionKeys::new("cart.commands", "c-7", "backfill").outcome("recorded-id");
    let _: () = client.set(&key, recorded, None, None, false).await?;

    // A resend of the id (the caller's): the recorded outcome, no run.
    let resent: Added = owner
        .send_with(add("c-7", "s", 1, "ok"), SendOptions::new().id("recorded-id"))
        .await?;
    assert_eq!(resent.seq, 99);
    assert_eq!(journal.runs.load(Ordering::SeqCst), 0);

    // A run of an id whose outcome another run (a stale owner's) recorded
    // while it ran: the owner's SET NX keeps the first, and the sender gets
    // that one, not this run's.
    let racing = ordo_redis::PartitionKeys::new("cart.commands", "c-7", "backfill").outcome("racing-id");
    let sender = owner.clone();
    let send = tokio::spawn(async move {
        sender
            .send_with::<_, Added>(add("c-7", "s", 2, "slow"), SendOptions::new().id("racing-id"))
            .await
    });
    ordo_testkit::eventually(Duration::from_secs(10), "the slow run started", || {
        let started = journal.running.lock().unwrap().get("c-7").copied().unwrap_or(0) > 0;
        async move { Ok(started) }
    })
    .await?;
    let first = r#"{"outcome":"succeeded","value":{"cart_id":"c-7","seq":7,"runs":0}}"#;
    let set: Option<String> = client
        .set(&racing, first, None, Some(fred::types::SetOptions::NX), false)
        .await?;
    assert!(set.is_some(), "recorded before the slow run ended");
    let got = send.await??;
    assert_eq!(
        got.seq, 7,
        "the sender got the first recorded outcome, not its run's"
    );
    // The run ends after the sender found the record; it leaves it be.
    ordo_testkit::eventually(Duration::from_secs(10), "the slow run ended", || {
        let ended = journal.runs.load(Ordering::SeqCst) == 1;
        async move { Ok(ended) }
    })
    .await?;
    ordo_testkit::eventually(Duration::from_secs(10), "the run's outcome handled", || {
        let client = client.clone();
        let racing = racing.clone();
        async move {
            let pending: u64 = fred::interfaces::StreamsInterface::xlen(&client, "{cart.commands:c-7}")
                .await
                .unwrap_or(1);
            let stored: Option<String> = client.get(&racing).await.ok().flatten();
            Ok(pending == 0 || stored.is_some())
        }
    })
    .await?;
    let stored: String = client.get(&racing).await?;
    assert_eq!(stored, first, "the owner did not overwrite the recorded outcome");
    running.shutdown().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_command_sent_to_a_partition_its_sender_owns_runs_in_place
);

/// The local-owner path: once this instance's worker holds the command
/// partition, its own commands run there without touching the stream (the
/// partition's entries-added counter stays put), in order.
async fn a_command_sent_to_a_partition_its_sender_owns_runs_in_place(redis: TestRedis) -> anyhow::Result<()> {
    use fred::interfaces::StreamsInterface;
    let url = redis.url();
    let journal = Arc::new(Journal::default());
    let owner = worker(&url, "in-place", &journal, Duration::ZERO).await?;
    let running = owner.start();
    // The first one creates the partition through Redis; this instance
    // then takes it over.
    let _: Added = owner.send(add("c-3", "me", 1, "ok")).await?;
    let client = common::pool(&url).await?;
    let added = || async {
        let info: HashMap<String, fred::types::Value> =
            client.xinfo_stream("{cart.commands:c-3}", false, None).await?;
        anyhow::Ok(
            info.get("entries-added")
                .and_then(fred::types::Value::as_u64)
                .unwrap_or(0),
        )
    };
    let before = added().await?;
    for seq in 2..=20 {
        let reply: Added = owner.send(add("c-3", "me", seq, "ok")).await?;
        assert_eq!(reply.seq, seq);
    }
    let ran = journal.ran.lock().unwrap()["c-3"].clone();
    assert_eq!(
        ran.iter().map(|(_, q)| *q).collect::<Vec<_>>(),
        (1..=20).collect::<Vec<_>>()
    );
    let after = added().await?;
    assert!(
        after - before <= 1,
        "at most the first command after the worker took the partition went through the stream: {before} → {after}"
    );
    running.shutdown().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_reclaimed_command_whose_outcome_is_recorded_is_answered_without_running
);

/// Conformance with the commands model (`recorded_never_rerun`, the
/// `rerun-reclaimed` mutant): a command an owner died with after recording
/// its outcome is answered with that outcome by the next owner, which
/// reclaims it without running it again.
async fn a_reclaimed_command_whose_outcome_is_recorded_is_answered_without_running(
    redis: TestRedis,
) -> anyhow::Result<()> {
    use fred::interfaces::{KeysInterface, StreamsInterface};
    let url = redis.url();
    let journal = Arc::new(Journal::default());
    // A first owner creates the partition and its group, then leaves.
    let first = worker(&url, "reclaim-first", &journal, Duration::ZERO).await?;
    let running = first.start();
    let _: Added = first.send(add("c-8", "s", 1, "ok")).await?;
    running.shutdown().await?;

    // A sender's command, read by an owner that died with it after
    // recording its outcome (by hand: the entry read as every owner reads,
    // consumer `ordo`, never acknowledged; the outcome recorded).
    let sender = Domain::builder()
        .aggregate::<Cart>()
        .command_handler_type::<Carts>()
        .broker(instance(&url, "reclaim-sender").await?)
        .config(config(3_000, 3_600_000, 0))
        .init()?;
    let client = common::pool(&url).await?;
    let stream = "{cart.commands:c-8}";
    let before: u64 = client.xlen(stream).await?;
    let send = tokio::spawn(async move {
        sender
            .send_with::<_, Added>(add("c-8", "s", 2, "ok"), SendOptions::new().id("reclaimed-id"))
            .await
    });
    ordo_testkit::eventually(Duration::from_secs(10), "the command published", || {
        let client = client.clone();
        async move {
            let length: u64 = client.xlen(stream).await.map_err(|e| e.to_string())?;
            Ok(length > before)
        }
    })
    .await?;
    let _: fred::types::Value = client
        .xreadgroup("commands", "ordo", Some(10), None, false, stream, ">")
        .await?;
    let recorded = r#"{"outcome":"succeeded","value":{"cart_id":"c-8","seq":77,"runs":0}}"#;
    let key = ordo_redis::PartitionKeys::new("cart.commands", "c-8", "backfill").outcome("reclaimed-id");
    let _: () = client.set(&key, recorded, None, None, false).await?;

    // The next owner reclaims it.
    let next = worker(&url, "reclaim-next", &journal, Duration::ZERO).await?;
    let running = next.start();
    let got = send.await??;
    assert_eq!(got.seq, 77, "the recorded outcome");
    ordo_testkit::eventually(
        Duration::from_secs(10),
        "the reclaimed entry acknowledged",
        || {
            let client = client.clone();
            async move {
                let pending: (u64, fred::types::Value, fred::types::Value, fred::types::Value) = client
                    .xpending(stream, "commands", ())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(pending.0 == 0)
            }
        },
    )
    .await?;
    let ran: Vec<u32> = journal.ran.lock().unwrap()["c-8"]
        .iter()
        .map(|(_, q)| *q)
        .collect();
    assert_eq!(ran, [1], "the reclaimed command did not run again");
    running.shutdown().await?;
    Ok(())
}

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Cart)]
struct ItemAdded {
    cart_id: String,
    seq: u32,
}

/// Raises `ItemAdded` for each `AddItem`.
struct RaisingCarts {
    runs: Arc<AtomicU32>,
}

#[command_handler(part_of = Cart)]
impl RaisingCarts {
    #[handle]
    async fn add(&self, command: &AddItem, ctx: &HandlerContext) -> anyhow::Result<u32> {
        ctx.raise(ItemAdded {
            cart_id: command.cart_id.clone(),
            seq: command.seq,
        })?;
        Ok(self.runs.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

/// Counts the `ItemAdded` events it sees, by id.
#[derive(Clone, Default)]
struct AddedEvents {
    seen: Arc<Mutex<Vec<String>>>,
}

#[event_handler(part_of = Cart)]
impl AddedEvents {
    #[handle]
    async fn on_added(&self, _event: &ItemAdded, ctx: &HandlerContext) -> anyhow::Result<()> {
        self.seen.lock().unwrap().push(ctx.message_id().to_owned());
        Ok(())
    }
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_command_run_again_raises_its_events_once
);

/// A command run a second time (here: its outcome expired, as after an
/// owner died before recording it) raises events with the first run's ids,
/// which the broker's deduplication drops: they land once.
async fn a_command_run_again_raises_its_events_once(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let text = "[server.partitioning]\nlease_ttl_ms = 3000\nheartbeat_interval_seconds = 0.6\n\
                poll_interval_seconds = 0.1\ndiscovery_interval_seconds = 0.1\n\
                [commands]\ndedup_window_ms = 1\n";
    let config = ordo_core::contract::config::Config::from_toml_str(text)?;
    let runs = Arc::new(AtomicU32::new(0));
    let events = AddedEvents::default();
    let domain = Domain::builder()
        .aggregate::<Cart>()
        .command_handler(RaisingCarts {
            runs: Arc::clone(&runs),
        })
        .event_handler(events.clone())
        .broker(RedisBroker::builder(&url).config(config.clone()).build().await?)
        .config(config)
        .init()?;
    let running = domain.start();
    let options = SendOptions::new().id("add-once");
    let first: u32 = domain
        .send_with(add("c-6", "s", 1, "ok"), options.clone())
        .await?;
    // Past the 1 ms window: the outcome record is gone.
    let client = common::pool(&url).await?;
    let record = ordo_redis::PartitionKeys::new("cart.commands", "c-6", "backfill").outcome("add-once");
    ordo_testkit::eventually(Duration::from_secs(5), "the outcome record expired", || {
        let (client, record) = (client.clone(), record.clone());
        async move {
            let exists: u64 = fred::interfaces::KeysInterface::exists(&client, &record)
                .await
                .map_err(|e| e.to_string())?;
            Ok(exists == 0)
        }
    })
    .await?;
    let second: u32 = domain.send_with(add("c-6", "s", 1, "ok"), options).await?;
    assert_eq!((first, second), (1, 2), "the command ran twice");
    domain.settle().await?;
    ordo_testkit::eventually(Duration::from_secs(10), "the event handled", || {
        let seen = events.seen.lock().unwrap().len();
        async move { Ok(seen >= 1) }
    })
    .await?;
    // A duplicate would arrive right behind the first.
    let _: u32 = domain.send(add("c-6", "s", 2, "ok")).await?;
    domain.settle().await?;
    ordo_testkit::eventually(Duration::from_secs(10), "the next event handled", || {
        let seen = events.seen.lock().unwrap().len();
        async move { Ok(seen >= 2) }
    })
    .await?;
    let seen = events.seen.lock().unwrap().clone();
    assert_eq!(seen, ["add-once/1".to_owned(), seen[1].clone()], "{seen:?}");
    assert_eq!(
        seen.iter().filter(|id| *id == "add-once/1").count(),
        1,
        "{seen:?}"
    );
    running.shutdown().await?;
    Ok(())
}

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Cart)]
struct CartOpened {
    cart_id: String,
}

/// What a handler saw of one message: what, its id, its correlation id,
/// its causation id, and whether it says when it occurred.
type Seen = (&'static str, String, String, Option<String>, bool);

/// Fills each opened cart with a command sent from its handler, and records
/// the lineage of the opening and of the event the command's handler raises.
#[derive(Clone, Default)]
struct Lineage {
    seen: Arc<Mutex<Vec<Seen>>>,
    domain: Arc<std::sync::OnceLock<Domain>>,
}

impl Lineage {
    fn record(&self, what: &'static str, ctx: &HandlerContext) {
        self.seen.lock().unwrap().push((
            what,
            ctx.message_id().to_owned(),
            ctx.correlation_id().to_owned(),
            ctx.causation_id().map(str::to_owned),
            ctx.occurred_at().is_some(),
        ));
    }
}

#[event_handler(part_of = Cart)]
impl Lineage {
    #[handle]
    async fn on_opened(&self, event: &CartOpened, ctx: &HandlerContext) -> anyhow::Result<()> {
        self.record("opened", ctx);
        let domain = self.domain.get().expect("set before anything is raised");
        let options = SendOptions::new().id(format!("fill-{}", event.cart_id));
        let _: u32 = domain
            .send_with(add(&event.cart_id, "lineage", 1, "ok"), options)
            .await?;
        Ok(())
    }

    #[handle]
    async fn on_added(&self, _event: &ItemAdded, ctx: &HandlerContext) -> anyhow::Result<()> {
        self.record("added", ctx);
        Ok(())
    }
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_conversation_crosses_redis_from_an_event_to_a_command_and_its_event
);

/// An event read from its Redis stream, a command its handler sends across
/// the broker, and the event that command's handler raises: each carries
/// the conversation of the first (its correlation id) and names its cause.
async fn a_conversation_crosses_redis_from_an_event_to_a_command_and_its_event(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let lineage = Lineage::default();
    let domain = Domain::builder()
        .aggregate::<Cart>()
        .command_handler(RaisingCarts {
            runs: Arc::new(AtomicU32::new(0)),
        })
        .event_handler(lineage.clone())
        .broker(instance(&url, "lineage").await?)
        .config(config(3_000, 3_600_000, 0))
        .init()?;
    assert!(lineage.domain.set(domain.clone()).is_ok());
    let running = domain.start();
    let mut uow = domain.unit_of_work();
    uow.raise(CartOpened {
        cart_id: "c-9".into(),
    })?;
    uow.commit().await?;
    ordo_testkit::eventually(Duration::from_secs(20), "the command's event handled", || {
        let done = lineage.seen.lock().unwrap().iter().any(|seen| seen.0 == "added");
        async move { Ok(done) }
    })
    .await?;
    running.shutdown().await?;
    let seen = lineage.seen.lock().unwrap().clone();
    let [opened, added] = &seen[..] else {
        anyhow::bail!("expected the opening and one added event: {seen:?}");
    };
    assert_eq!(opened.0, "opened");
    assert_eq!(
        (&opened.2, &opened.3),
        (&opened.1, &None),
        "the opening starts its conversation"
    );
    assert_eq!(added.1, "fill-c-9/1", "the command's first event");
    assert_eq!(&added.2, &opened.1, "the conversation crossed the command");
    assert_eq!(
        added.3.as_deref(),
        Some("fill-c-9"),
        "the command caused the event"
    );
    assert!(
        opened.4 && added.4,
        "every message says when it occurred: {seen:?}"
    );
    Ok(())
}
