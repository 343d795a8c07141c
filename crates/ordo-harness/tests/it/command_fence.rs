//! A command run that loses its lease mid-run (as an owner stalled past
//! its lease does, while another instance takes the partition): its effect
//! is refused by the fence, and that refusal is not the command's outcome.
//! For events the delivery recognises such an error (`fenced_by`) and
//! leaves the message to the new owner; a command's sender must likewise
//! get the outcome of a run under a held lease, never "the handler failed:
//! fenced" recorded under the id (which every resend of the id would then
//! get, and which a successor that runs the command anyway cannot correct).
//!
//! Seen in `ordo-bench chaos --commands` (seed 5 and 6 with `--faults
//! stop,kill --faults-every 1..3`, timing-dependent): an owner SIGSTOPped
//! mid-command past its lease wakes, its commit is fenced, and its sender
//! gets `command handler `PokeHandler` failed on `Poke`: fenced: lease ...
//! is no longer held`.

use crate::support;

use std::time::Duration;

use fred::interfaces::KeysInterface as _;
use fred::types::Expiration;
use ordo_core::runtime::builder::COMMANDS_GROUP;
use ordo_core::{DispatchError, Domain, SendOptions};
use ordo_harness::commands::{Poke, PokeHandler, Poked};
use ordo_harness::keys::CommandRecords;
use ordo_harness::worker::{TickHandler, WorkerOptions, domain_with};
use ordo_redis::RedisBroker;
use ordo_testkit::wait_until;
use support::Env;

#[test]
fn a_command_run_whose_lease_was_lost_does_not_record_its_outcome() -> anyhow::Result<()> {
    let env = Env::start()?;
    let mut options = WorkerOptions::new(env.redis.url(), "owner");
    // Renewals far apart: the run's commit, not the heartbeat, is what
    // meets the lost lease first (as when a stalled process wakes up).
    options.lease_ttl_ms = 30_000;
    options.heartbeat_ms = 10_000;
    let config = options.config()?;
    let records = CommandRecords::default();
    let (sender, running) = env.block_on(async {
        let broker = RedisBroker::builder(&options.redis_url)
            .config(config.clone())
            .instance_id("owner")
            .build()
            .await?;
        let client = broker.client().clone();
        let pokes = PokeHandler::new(client.clone(), "owner", records.clone());
        let owner = domain_with(
            broker,
            TickHandler::new(client, "owner"),
            Some(pokes),
            config.clone(),
        )?;
        let running = owner.start();
        // Another instance sends: the command travels to the owner.
        let sender = Domain::builder()
            .aggregate::<ordo_harness::tick::Chaos>()
            .command_handler_type::<PokeHandler>()
            .broker(
                RedisBroker::builder(&options.redis_url)
                    .config(config.clone())
                    .instance_id("sender")
                    .build()
                    .await?,
            )
            .config(config)
            .init()?;
        anyhow::Ok((sender, running))
    })?;

    let poke = Poke {
        key: "c0".to_owned(),
        sender: "s".to_owned(),
        seq: 1,
        work_ms: 1_500,
    };
    let send = env.spawn(async move {
        sender
            .send_with::<_, Poked>(
                poke,
                SendOptions::new().id("s-c0-1").timeout(Duration::from_secs(5)),
            )
            .await
    });
    let marker = records.marker("c0");
    wait_until(Duration::from_secs(10), "the command's run to begin", || {
        env.block_on(env.client().exists::<u64, _>(&marker))
            .is_ok_and(|n| n > 0)
    })?;
    // Another instance holds the partition now, at a higher token.
    let lease = records.partition("c0").lease(COMMANDS_GROUP).lease;
    let held: String = env.block_on(env.client().get(&lease))?;
    let token: u64 = held
        .rsplit_once(':')
        .and_then(|(_, token)| token.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("lease value `{held}`"))?;
    let _: () = env.block_on(env.client().set(
        &lease,
        format!("thief:0:{}", token + 1),
        Some(Expiration::PX(30_000)),
        None,
        false,
    ))?;

    let sent = env.block_on(send)?;
    let outcome_key = records.partition("c0").outcome("s-c0-1");
    let recorded: Option<String> = env.block_on(env.client().get(&outcome_key))?;
    let applied: Vec<String> = env.block_on(fred::interfaces::ListInterface::lrange(
        env.client(),
        records.applied("c0"),
        0,
        -1,
    ))?;
    assert!(
        applied.is_empty(),
        "the fence let the stale run's effect in: {applied:?}"
    );
    // The refused run is no outcome: nobody ran the command under a held
    // lease within the call's timeout.
    assert!(
        matches!(sent, Err(DispatchError::Timeout { .. })),
        "the sender got {sent:?}; recorded under the id: {recorded:?}"
    );
    assert_eq!(
        recorded, None,
        "a lease loss was recorded as the command's outcome"
    );
    env.block_on(running.shutdown())?;
    Ok(())
}
