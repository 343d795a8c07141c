//! `baseline`: the same backlog Ordo drains, drained by a plain Redis
//! consumer group, the obvious alternative Ordo is compared with.
//!
//! The backlog is one stream of entries laid out as Ordo writes them
//! ([`crate::workload`]), filled with pipelined XADDs. Then `--consumers`
//! tasks, each with its own connection, loop XREADGROUP COUNT `--batch`,
//! decode every entry (envelope, then event) and XACK the batch: no leases,
//! no ordering, nothing else. The stream is deleted at the end.

use std::num::{NonZeroU64, NonZeroUsize};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use fred::clients::Client;
use fred::prelude::{ClientLike as _, KeysInterface as _, StreamsInterface as _};
use fred::types::Value;
use fred::types::streams::XReadResponse;
use tokio::task::JoinSet;

use crate::redis::BenchRedis;
use crate::report::{Report, rate};
use crate::workload::{self, BenchEvent};

/// Entries per XADD pipeline while filling.
const FILL_PIPELINE: u64 = 5_000;
/// The consumer group's name.
const GROUP: &str = "ordo-bench-baseline";

/// Options of `ordo-bench baseline`.
#[derive(Debug, Clone, clap::Args)]
pub struct BaselineArgs {
    /// Events in the backlog.
    #[arg(long, default_value = "200000")]
    pub events: NonZeroU64,
    /// Keys the events are spread over (round-robin; recorded in each event,
    /// though a plain consumer group ignores them).
    #[arg(long, default_value = "64")]
    pub keys: NonZeroUsize,
    /// Entries per XREADGROUP (and per XACK).
    #[arg(long, default_value = "64")]
    pub batch: NonZeroU64,
    /// Consumers in the group, each a task with its own connection.
    #[arg(long, default_value = "1")]
    pub consumers: NonZeroUsize,
}

/// Fills the backlog, drains it, and reports `baseline_msgs_per_s`.
pub async fn run(args: &BaselineArgs, redis: &BenchRedis) -> Result<Report> {
    let stream = format!("ordo-bench:baseline:{}:{}", std::process::id(), unique_suffix());
    let admin = redis.client().await?;
    let result = fill_and_drain(args, redis, &admin, &stream).await;
    // Delete the backlog even when the run failed: a shared Redis keeps no leftovers.
    let cleanup: Result<i64, _> = admin.del(&stream).await;
    let report = result?;
    cleanup.with_context(|| format!("could not delete the backlog stream {stream}"))?;
    admin.quit().await?;
    Ok(report)
}

async fn fill_and_drain(
    args: &BaselineArgs,
    redis: &BenchRedis,
    admin: &Client,
    stream: &str,
) -> Result<Report> {
    let events = args.events.get();
    let () = admin
        .xgroup_create(stream, GROUP, "0", true)
        .await
        .context("XGROUP CREATE failed")?;
    let fill_started = Instant::now();
    fill(admin, stream, events, args.keys.get()).await?;
    let fill_elapsed = fill_started.elapsed();

    let mut clients = Vec::with_capacity(args.consumers.get());
    for _ in 0..args.consumers.get() {
        clients.push(redis.client().await?);
    }
    let started = Instant::now();
    let drained = drain(clients, stream, args.batch.get()).await?;
    let elapsed = started.elapsed();

    ensure!(
        drained.handled == events,
        "published {events} events but the consumers handled {}",
        drained.handled
    );
    let expected_checksum: u64 = (0..events)
        .map(|seq| BenchEvent::nth(seq, args.keys.get()).seq)
        .sum();
    ensure!(
        drained.checksum == expected_checksum,
        "the handled events are not the published ones (checksum {} != {expected_checksum})",
        drained.checksum
    );

    let mut report = Report::new();
    report
        .per_second("baseline_msgs_per_s", rate(events, elapsed))
        .count("events", drained.handled)
        .count("keys", args.keys.get() as u64)
        .count("batch", args.batch.get())
        .count("consumers", args.consumers.get() as u64)
        .millis("elapsed_ms", elapsed)
        .per_second("fill_msgs_per_s", rate(events, fill_elapsed));
    Ok(report)
}

/// Adds `events` entries to `stream`, [`FILL_PIPELINE`] per pipeline.
async fn fill(client: &Client, stream: &str, events: u64, keys: usize) -> Result<()> {
    let mut seq = 0;
    while seq < events {
        let end = (seq + FILL_PIPELINE).min(events);
        let pipeline = client.pipeline();
        for n in seq..end {
            let fields = workload::entry_fields(&workload::envelope(&BenchEvent::nth(n, keys))?)?;
            let () = pipeline.xadd(stream, false, None::<()>, "*", fields).await?;
        }
        let ids: Vec<Value> = pipeline.all().await.context("XADD pipeline failed")?;
        ensure!(
            ids.len() as u64 == end - seq,
            "XADD pipeline answered {} of {}",
            ids.len(),
            end - seq
        );
        seq = end;
    }
    Ok(())
}

/// What the consumers did, summed.
#[derive(Debug, Default)]
struct Drained {
    handled: u64,
    /// The sum of the handled events' numbers: proves they were decoded.
    checksum: u64,
}

/// Runs one consumer per client until the backlog is empty.
async fn drain(clients: Vec<Client>, stream: &str, batch: u64) -> Result<Drained> {
    let mut consumers = JoinSet::new();
    for (n, client) in clients.into_iter().enumerate() {
        let stream = stream.to_owned();
        consumers.spawn(async move {
            let drained = consume(&client, &stream, &format!("consumer-{n}"), batch).await;
            client.quit().await?;
            drained
        });
    }
    let mut total = Drained::default();
    while let Some(drained) = consumers.join_next().await {
        let drained = drained.context("a consumer task panicked")??;
        total.handled += drained.handled;
        total.checksum += drained.checksum;
    }
    Ok(total)
}

/// Reads, handles and acknowledges batches until a read finds nothing new:
/// the backlog was complete before the drain started, so that means done.
async fn consume(client: &Client, stream: &str, consumer: &str, batch: u64) -> Result<Drained> {
    let mut drained = Drained::default();
    loop {
        let reply: Value = client
            .xreadgroup(GROUP, consumer, Some(batch), None, false, stream, ">")
            .await
            .context("XREADGROUP failed")?;
        // Nothing new is a nil reply, which is not a map.
        if reply.is_null() {
            return Ok(drained);
        }
        let mut reply: XReadResponse<String, String, String, String> = reply
            .into_xread_response()
            .context("unexpected XREADGROUP reply")?;
        let entries = reply.remove(stream).unwrap_or_default();
        if entries.is_empty() {
            return Ok(drained);
        }
        let mut ids = Vec::with_capacity(entries.len());
        for (id, fields) in entries {
            let json = fields
                .get("envelope")
                .with_context(|| format!("entry {id} has no envelope field"))?;
            let event = workload::decode_entry(json).with_context(|| format!("entry {id}"))?;
            drained.handled += 1;
            drained.checksum += event.seq;
            ids.push(id);
        }
        let count = ids.len() as u64;
        let acked: u64 = client.xack(stream, GROUP, ids).await.context("XACK failed")?;
        ensure!(acked == count, "XACK acknowledged {acked} of {count} entries");
    }
}

/// Distinguishes two runs of the same process (tests run several).
fn unique_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos()
}
