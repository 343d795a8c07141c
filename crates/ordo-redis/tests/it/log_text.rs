//! A handler's error text is untrusted: on the Redis broker too, a newline
//! in it must not forge a log line and an escape sequence must not reach
//! the terminal of whoever reads the log (every `error=` field goes
//! through `ordo_core::contract::text::log_text`), and megabytes of it are neither
//! logged whole nor stored whole in a halt record, a parked key's record or
//! a dead letter (capped at `ordo_core::contract::text::MAX_ERROR_TEXT`, saying how
//! much was cut). A partition worker, the owner of a hashed partition and
//! a plain consumer, captured as a text log (`tracing_subscriber::fmt`, no
//! colours). Its own binary: the capturing subscriber is global.

use crate::common;

use std::io::Write;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::interfaces::StreamsInterface;
use fred::types::Value;
use ordo_core::contract::broker::{Broker, Publication};
use ordo_core::contract::log_events;
use ordo_core::contract::text::MAX_ERROR_TEXT;
use ordo_redis::{HaltedPartition, PartitionAdmin, PartitionId, PartitionKeys};
use ordo_testkit::{Redis, eventually};

use common::{Outcome, Recorder, Running, broker, config, envelope, pool, publish_seqs, subscribe};

/// A forged log line, a carriage return, a screen clear, an OSC 52
/// clipboard write and a bidi override, then a megabyte.
fn hostile() -> &'static str {
    Box::leak(
        format!(
            "\n2030-01-01T00:00:00.000000Z  INFO ordo: all good, forged\r\x1b[2J\x1b]52;c;SGVsbG8=\x07\u{202e}{}",
            "x".repeat(1 << 20)
        )
        .into_boxed_str(),
    )
}

/// Every formatted log line.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Fails unless `error` (what was stored of the hostile error) is capped.
fn assert_capped(what: &str, error: &str) {
    assert!(
        error.len() <= MAX_ERROR_TEXT,
        "{what}: {} bytes stored",
        error.len()
    );
    assert!(
        error.starts_with("poison "),
        "{what}: {}",
        &error[..error.len().min(80)]
    );
    assert!(
        error.ends_with("bytes cut]"),
        "{what}: {}",
        &error[error.len().saturating_sub(80)..]
    );
}

async fn wait_halted(admin: &PartitionAdmin, key: &str) -> anyhow::Result<HaltedPartition> {
    let halted =
        || async { Ok::<_, anyhow::Error>(admin.halted().await?.into_iter().find(|h| h.key == key)) };
    eventually(Duration::from_secs(15), &format!("{key} to halt"), || async {
        Ok(halted().await?.is_some())
    })
    .await?;
    Ok(halted().await?.expect("halted"))
}

/// The `error` field of each entry of `stream`.
async fn errors_in(client: &fred::clients::Pool, stream: &str) -> anyhow::Result<Vec<String>> {
    let entries: Value = client.xrange(stream, "-", "+", None).await?;
    let mut errors = Vec::new();
    for entry in entries.into_array() {
        let flat = entry
            .into_array()
            .into_iter()
            .nth(1)
            .map(Value::into_array)
            .unwrap_or_default();
        for pair in flat.chunks(2) {
            if pair[0].as_str().as_deref() == Some("error") {
                errors.push(pair[1].as_str().map(|s| s.into_owned()).unwrap_or_default());
            }
        }
    }
    Ok(errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_error_text_is_escaped_in_log_lines_and_capped_where_it_is_stored() -> anyhow::Result<()> {
    let lines = Lines::default();
    let writer = lines.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )?;
    let redis = Redis::start()?;
    let url = redis.url();
    let client = pool(&url).await?;
    let text = hostile();
    let recorder = Recorder::with(Arc::new(move |_, seq, _| {
        if seq == 1 {
            Outcome::FailWith(text)
        } else {
            Outcome::Succeed
        }
    }));
    let per_key = common::category("logkey");
    let hashed = common::category("loghashed");
    let plain = common::category("logplain");
    let config = config(3_000, 3_600_000, 1).with_partitions(
        &hashed,
        ordo_core::Partitions::Hashed(NonZeroU32::new(1).unwrap()),
    );
    let a = broker(&url, config).await?;
    publish_seqs(&a, &per_key, "k", 0..3).await?;
    publish_seqs(&a, &hashed, "h", 0..3).await?;
    a.publish(&[Publication::to_base(envelope(&plain, "Happened", None, 1))])
        .await?;
    let run = Running::start(
        &a,
        vec![
            subscribe::partitioned("Keyed", &per_key, &recorder),
            subscribe::partitioned("Hashed", &hashed, &recorder),
            subscribe::plain("Plain", &plain, &recorder),
        ],
    );
    let admin = a.admin();
    let halt = wait_halted(&admin, "k").await?;
    assert_capped("the halt record", &halt.error);
    let park = wait_halted(&admin, "h").await?;
    assert!(park.parked);
    assert_capped("the parked key's record", &park.error);
    let plain_dlq = ordo_redis::plain_dlq(&plain);
    eventually(
        Duration::from_secs(15),
        "the plain message dead-lettered",
        || async { Ok(errors_in(&client, &plain_dlq).await?.len() == 1) },
    )
    .await?;
    assert_capped("the plain dead letter", &errors_in(&client, &plain_dlq).await?[0]);

    // An operator's dead-lettering copies the capped record.
    admin.dead_letter("Keyed", &per_key, "k").await?;
    admin.dead_letter("Hashed", &hashed, "h").await?;
    recorder.wait_seqs("k", &[0, 2]).await?;
    recorder.wait_seqs("h", &[0, 2]).await?;
    assert_capped(
        "a partition's dead letter",
        &errors_in(&client, &common::partition(&per_key, "k").dlq()).await?[0],
    );
    let bucket = PartitionKeys::of(PartitionId::hashed(&hashed, 0), "backfill");
    assert_capped(
        "a hashed partition's dead letter",
        &errors_in(&client, &bucket.dlq()).await?[0],
    );
    run.stop().await?;

    let log = String::from_utf8(lines.0.lock().unwrap().clone())?;
    for event in [
        log_events::HANDLER_FAILED,
        log_events::PARTITION_HALTED,
        log_events::KEY_PARKED,
        log_events::MESSAGE_DEAD_LETTERED,
    ] {
        assert!(log.contains(event), "{event} was logged");
    }
    assert!(!log.contains('\x1b') && !log.contains('\r') && !log.contains('\u{202e}'));
    for line in log.lines() {
        assert!(!line.starts_with("2030-01-01"), "a forged log line: {line}");
        assert!(
            line.len() < 2 * MAX_ERROR_TEXT,
            "a log line of {} bytes",
            line.len()
        );
    }
    assert!(log.contains("\\n2030-01-01T00:00:00.000000Z  INFO ordo: all good, forged\\r\\u{1b}[2J"));
    Ok(())
}
