//! A password in the Redis URL never shows: not in the `Debug` of the
//! builder or the broker, not in a connection error, not in a log line of a
//! broker that runs handlers. Its own binary: the capturing subscriber is
//! global, since the heartbeat logs from its own thread.

use crate::common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ordo_core::contract::broker::Broker;
use ordo_core::contract::key::Lane;
use ordo_core::contract::log_events;
use ordo_testkit::{Redis, eventually};

use common::{Recorder, Running, config, publication, subscribe};

/// The password of the test's ACL user; no output may contain it.
const PASSWORD: &str = "s3cret-Pa55word";
/// A wrong password; no error may contain it either.
const WRONG: &str = "wr0ng-Pa55word";

/// Every formatted log line, at every level.
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

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Fails when `text` (`what`) holds either password.
fn assert_secret_kept(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD) && !text.contains(WRONG),
        "{what} shows a password: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_url_never_shows_in_debug_errors_or_logs() -> anyhow::Result<()> {
    let lines = Lines::default();
    let writer = lines.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )?;
    let redis = Redis::start()?;
    redis.create_user("ordo", PASSWORD)?;
    let address = redis.url().trim_start_matches("redis://").to_owned();
    let url = format!("redis://ordo:{PASSWORD}@{address}");
    let masked = format!("redis://ordo:***@{address}");

    let builder = ordo_redis::RedisBroker::builder(&url).config(config(3_000, 60_000, 3));
    let shown = format!("{builder:?}");
    assert_secret_kept("the builder's Debug", &shown);
    assert!(shown.contains(&masked), "{shown}");

    let wrong = format!("redis://ordo:{WRONG}@{address}");
    let error = ordo_redis::RedisBroker::builder(&wrong)
        .build()
        .await
        .expect_err("a wrong password is refused");
    let chain = ordo_core::contract::error::error_chain(&error);
    assert_secret_kept("a connection error", &chain);
    assert_secret_kept("a connection error's Debug", &format!("{error:?}"));
    assert!(
        chain.starts_with(&format!(
            "cannot connect to Redis at redis://ordo:***@{address}: "
        )),
        "{chain}"
    );
    let malformed = ordo_redis::client_config(&format!("redis://ordo:{WRONG}@{address}:x"))
        .expect_err("a malformed port is refused");
    assert_secret_kept("an invalid URL error", &malformed.to_string());

    let broker = builder.build().await?;
    let shown = format!("{broker:?}");
    assert_secret_kept("the broker's Debug", &shown);
    assert!(shown.contains(&masked), "{shown}");

    let category = common::category("secret");
    let recorder = Recorder::new();
    let run = Running::start(
        &broker,
        vec![subscribe::partitioned("Keeper", &category, &recorder)],
    );
    broker
        .publish(&[
            publication(&category, "a", 0, Lane::Primary),
            publication(&category, "b", 0, Lane::Primary),
        ])
        .await?;
    eventually(Duration::from_secs(15), "both messages handled", || {
        let handled = recorder.handled().len();
        async move { Ok(handled == 2) }
    })
    .await?;
    run.stop().await?;

    let logged = lines.text();
    // The capture works: the run's lease was logged.
    assert!(logged.contains(log_events::LEASE_ACQUIRED), "{logged}");
    assert_secret_kept("the log", &logged);
    Ok(())
}
