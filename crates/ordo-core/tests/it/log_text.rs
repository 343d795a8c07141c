//! A handler's error text is untrusted: a newline in it must not forge a
//! log line, an escape sequence must not reach the terminal of whoever
//! reads the log, and megabytes of it must not be stored or logged whole.
//! The inline broker's log lines and records, captured as a text log
//! (`tracing_subscriber::fmt`, no colours) shows them. Its own binary: the
//! capturing subscriber is global.

use crate::support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use ordo_core::contract::handler::HandlerKind;
use ordo_core::contract::log_events;
use ordo_core::contract::text::MAX_ERROR_TEXT;
use ordo_core::{Config, Domain};
use support::*;

spec!(ByClient => handler("ByClient", HandlerKind::Event, "order", Some("client_id"), vec![
    on::<OrderPlaced>(Some(extractor!(OrderPlaced, client_id))),
]));
spec!(PerAggregate => handler("PerAggregate", HandlerKind::Event, "order", None, vec![on::<OrderPlaced>(None)]));

/// A forged log line, a carriage return, a screen clear, an OSC 52
/// clipboard write and a bidi override, then a megabyte.
fn hostile() -> String {
    format!(
        "\n2030-01-01T00:00:00.000000Z  INFO ordo: all good, forged\r\x1b[2J\x1b]52;c;SGVsbG8=\x07\u{202e}{}",
        "x".repeat(1 << 20)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_error_text_is_escaped_in_log_lines_and_capped_everywhere() {
    let lines = Lines::default();
    let writer = lines.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .unwrap();
    let probe = Probe::new("client_id")
        .poisoned_by(1)
        .with_error_text(hostile())
        .shared();
    let domain = Domain::builder()
        .config(
            Config::from_toml_str(
                "[server.partitioning]\nmax_retries = 1\nretry_backoff_initial_ms = 1\nretry_backoff_max_ms = 2\n",
            )
            .unwrap(),
        )
        .event_handler(Recorder::<ByClient>::new(&probe))
        .event_handler(Recorder::<PerAggregate>::new(&probe))
        .init()
        .unwrap();
    let mut uow = domain.unit_of_work();
    uow.raise(placed("o-1", "a", 1)).unwrap();
    uow.commit().await.unwrap();
    domain.settle().await.unwrap();

    let log = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    for event in [
        log_events::HANDLER_FAILED,
        log_events::PARTITION_HALTED,
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

    // What is stored is capped too, saying how much was cut.
    let broker = domain.inline_broker().unwrap();
    let halted = broker.halted();
    let failures = broker.failures();
    let dead = broker.dead_letters();
    let stored = halted
        .iter()
        .map(|h| &h.error)
        .chain(failures.iter().map(|f| &f.error))
        .chain(dead.iter().map(|d| &d.error));
    let mut count = 0;
    for error in stored {
        count += 1;
        assert!(error.len() <= MAX_ERROR_TEXT, "{} bytes stored", error.len());
        assert!(error.starts_with("poison message 1 in "), "{}", &error[..40]);
        assert!(error.ends_with("bytes cut]"), "{}", &error[error.len() - 40..]);
    }
    assert_eq!(count, 4, "a halt, two failure records and a dead letter");
}
