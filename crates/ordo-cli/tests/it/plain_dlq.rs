//! `ordo dlq` on the dead letters of plain (non-partitioned) consumer
//! groups: list, inspect, replay and purge, against a real Redis.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::bail;
use common::{Output, WAIT, ordo_on};
use ordo::prelude::*;
use ordo_testkit::{Redis, eventually};

/// The aggregate of the plain category `payment`.
#[derive(Debug, Aggregate)]
pub struct Payment;

/// A payment; `poison` ones fail while the ledger is poisoned.
#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Payment)]
pub struct PaymentMade {
    /// The payment's id.
    #[aggregate_id]
    pub payment_id: String,
    /// Whether the ledger fails on it.
    pub poison: bool,
}

/// A plain handler (no `sequential_by`): fails on poison payments while
/// `poisoned` is set, so they are dead-lettered to `payment:dlq`.
#[derive(Debug, Clone)]
pub struct Ledger {
    handled: Arc<Mutex<Vec<String>>>,
    poisoned: Arc<AtomicBool>,
}

#[event_handler(part_of = Payment)]
impl Ledger {
    #[handle]
    async fn on_made(&self, event: &PaymentMade, _ctx: &HandlerContext) -> anyhow::Result<()> {
        if event.poison && self.poisoned.load(Ordering::SeqCst) {
            bail!("payment {} cannot be booked", event.payment_id);
        }
        self.handled.lock().unwrap().push(event.payment_id.clone());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_dead_letters_are_listed_inspected_replayed_and_purged() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let url = redis.url();
    let (broker, config) = common::broker(&url).await?;
    let ledger = Ledger {
        handled: Arc::default(),
        poisoned: Arc::new(AtomicBool::new(true)),
    };
    let domain = Domain::builder()
        .aggregate::<Payment>()
        .event_handler(ledger.clone())
        .broker(broker.clone())
        .config(config)
        .init()?;
    let running = domain.start();
    let dir = tempfile::tempdir()?;
    let ordo = async |args: &[&str]| ordo_on(&url, dir.path(), args).await;
    let raise = |id: &'static str, poison: bool| {
        let domain = domain.clone();
        async move {
            let mut uow = domain.unit_of_work();
            uow.raise(PaymentMade {
                payment_id: id.to_owned(),
                poison,
            })?;
            uow.commit().await?;
            anyhow::Ok(())
        }
    };
    raise("p-1", false).await?;
    raise("p-2", true).await?;
    raise("p-3", false).await?;
    eventually(WAIT, "p-1 and p-3 booked", || async {
        Ok(ledger.handled.lock().unwrap().len() == 2)
    })
    .await?;
    let listed = |output: &Output| -> anyhow::Result<Vec<serde_json::Value>> {
        Ok(output.json()?.as_array().cloned().unwrap_or_default())
    };
    let plain_letters = || async {
        listed(
            &ordo(&["dlq", "list", "payment", "--plain", "--json"])
                .await?
                .expect_code(0)?,
        )
    };
    eventually(WAIT, "p-2 dead-lettered", || async {
        Ok(!plain_letters().await?.is_empty())
    })
    .await?;
    let letters = plain_letters().await?;

    // list: the plain dead letter, with no key, its group, attempts and error.
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert!(letter["key"].is_null());
    assert_eq!(letter["group"], "Ledger");
    assert_eq!(letter["attempts"], 2, "max_retries = 1: two attempts");
    assert_eq!(letter["error"], "payment p-2 cannot be booked");
    assert_eq!(letter["message"]["envelope"]["payload"]["payment_id"], "p-2");
    let id = letter["id"].as_str().unwrap().to_owned();
    // Without --plain or a key, the category's listing includes them too.
    let all = listed(
        &ordo(&["dlq", "list", "payment", "--json"])
            .await?
            .expect_code(0)?,
    )?;
    assert_eq!(all, letters);
    let text = ordo(&["dlq", "list", "payment"]).await?.expect_code(0)?;
    assert!(
        text.stdout.contains(&id) && text.stdout.contains("Ledger"),
        "{}",
        text.stdout
    );

    // inspect: the whole entry; an unknown id is a usage error naming it.
    let inspected = ordo(&["dlq", "inspect", "payment", "--plain", "--id", &id, "--json"])
        .await?
        .expect_code(0)?;
    assert_eq!(&inspected.json()?, letter);
    let text = ordo(&["dlq", "inspect", "payment", "--plain", "--id", &id])
        .await?
        .expect_code(0)?;
    text.expect_stdout("payment p-2 cannot be booked")?;
    let unknown = ordo(&["dlq", "inspect", "payment", "--plain", "--id", "0-1"])
        .await?
        .expect_code(2)?;
    unknown.expect_stderr("no dead letter `0-1` in `payment:dlq`")?;
    // A key and --plain together, or neither, are refused by the parser.
    ordo(&["dlq", "inspect", "payment", "k", "--plain", "--id", &id])
        .await?
        .expect_code(2)?;
    ordo(&["dlq", "replay", "payment", "-y"]).await?.expect_code(2)?;

    // replay: back to the base stream, handled once cured, gone from the DLQ.
    ordo(&["dlq", "replay", "payment", "--plain"])
        .await?
        .expect_code(3)?;
    ledger.poisoned.store(false, Ordering::SeqCst);
    let replayed = ordo(&["dlq", "replay", "payment", "--plain", "-y", "--json"])
        .await?
        .expect_code(0)?;
    let report = replayed.json()?;
    assert!(report["key"].is_null());
    assert_eq!(report["replayed"][0]["dead_letter_id"], id.as_str());
    eventually(WAIT, "p-2 booked after the replay", || async {
        Ok(ledger.handled.lock().unwrap().contains(&"p-2".to_owned()))
    })
    .await?;
    assert!(plain_letters().await?.is_empty());

    // purge: one by id, then the rest; an unknown id purges nothing.
    ledger.poisoned.store(true, Ordering::SeqCst);
    raise("p-4", true).await?;
    raise("p-5", true).await?;
    eventually(WAIT, "p-4 and p-5 dead-lettered", || async {
        Ok(plain_letters().await?.len() == 2)
    })
    .await?;
    let letters = plain_letters().await?;
    assert_eq!(letters.len(), 2);
    let first = letters[0]["id"].as_str().unwrap().to_owned();
    let refused = ordo(&[
        "dlq", "purge", "payment", "--plain", "--id", &first, "--id", "0-1", "-y",
    ])
    .await?
    .expect_code(2)?;
    refused.expect_stderr("nothing purged")?;
    ordo(&["dlq", "purge", "payment", "--plain", "--id", &first])
        .await?
        .expect_code(3)?;
    let purged = ordo(&[
        "dlq", "purge", "payment", "--plain", "--id", &first, "-y", "--json",
    ])
    .await?
    .expect_code(0)?;
    assert_eq!(purged.json()?["purged"], serde_json::json!([first]));
    let left = plain_letters().await?;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["message"]["envelope"]["payload"]["payment_id"], "p-5");
    ordo(&["dlq", "purge", "payment", "--plain", "-y"])
        .await?
        .expect_code(0)?;
    assert!(plain_letters().await?.is_empty());

    running.shutdown().await?;
    Ok(())
}
