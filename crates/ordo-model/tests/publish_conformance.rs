//! The publish model is the code: random histories drawn from
//! [`ordo_model::publish`]'s action space (commits, calls sent, carried out,
//! timed out, landing late or never, restarts with a new producer id) run
//! against the real publish script on a real Redis, through the Redis
//! broker (`Publication::with_producer`), and after every call Redis
//! carries out, each stream's entries and each producer's recorded last
//! sequence must be the model's.
//!
//! A call whose `XADD` fails at publication `n` is played as the call cut
//! before `n` (in the model nothing of a failed publication is recorded,
//! nothing after it tried): the failure itself is `ordo-redis`'s test
//! `producer::a_failed_append_records_nothing_of_it_and_everything_before_it`.
//! Each publication names the one before it in its stream when the model's
//! call does (`Publication::after`: sent while that one's call is out), and
//! a call the model stops at a gap must fail on the real script too.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context as _, bail};
use fred::clients::Pool;
use fred::interfaces::{ClientLike, HashesInterface, StreamsInterface};
use fred::prelude::{Builder, Config as FredConfig};
use ordo_core::contract::broker::{Broker, Publication};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::{Envelope, MessageKind, Metadata};
use ordo_model::publish::{Action, Call, Publish, PublishConfig, PublishMutant, PublishState, Reply, Which};
use ordo_redis::{PartitionKeys, RedisBroker};
use ordo_testkit::Redis;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use stateright::Model;

/// Longer histories than the exhaustive check's: 6 rows over 2 streams,
/// batches of 3, two calls in flight, 4 faults and 2 restarts.
const CONFIG: PublishConfig = PublishConfig {
    rows: 6,
    streams: 2,
    batch: 3,
    faults: 4,
    restarts: 2,
    in_flight: 2,
};

/// One history's Redis side: its own category, one partition per stream of
/// the model.
struct Real {
    broker: RedisBroker,
    client: Pool,
    category: String,
}

impl Real {
    fn partition(&self, stream: u8) -> PartitionKeys {
        PartitionKeys::new(&self.category, &format!("s{stream}"), "backfill")
    }

    /// The model's producer `id` in Redis.
    fn producer(id: u8) -> String {
        format!("p{id}")
    }

    /// Carries out `call` (its first `upto` publications) as the publish
    /// script does, through the broker; `Err` when the broker answered an
    /// error.
    async fn execute(
        &self,
        state: &PublishState,
        call: &Call,
        upto: usize,
    ) -> anyhow::Result<Result<(), ordo_core::contract::broker::PublishError>> {
        let producer: Arc<str> = Arc::from(Self::producer(call.producer));
        let publications: Vec<Publication> = call.rows[..upto]
            .iter()
            .zip(&call.prevs)
            .map(|(&index, &prev)| {
                let row = state.rows[usize::from(index)];
                let key = format!("s{}", row.stream);
                let envelope = Envelope {
                    // A row's resends carry its id; nothing depends on it.
                    id: format!("{}-{}-{index}", self.category, row.incarnation),
                    kind: MessageKind::Event,
                    type_name: "Row".to_owned(),
                    category: self.category.clone(),
                    aggregate_id: None,
                    routing_key: None,
                    partition_key: Some(key.clone()),
                    metadata: Metadata::new(),
                    occurred_at: None,
                    correlation_id: None,
                    causation_id: None,
                    payload: index.to_string().into(),
                };
                Publication::to_partition(key, Lane::Primary, envelope)
                    .with_producer(Arc::clone(&producer), u64::from(row.seq))
                    .after(u64::from(prev))
            })
            .collect();
        if publications.is_empty() {
            return Ok(Ok(()));
        }
        Ok(self.broker.publish(&publications).await)
    }

    /// Each stream's entries (rows, by index) and producer hash.
    async fn observe(&self, streams: u8) -> anyhow::Result<Observed> {
        let mut observed = Observed::default();
        for stream in 0..streams {
            let partition = self.partition(stream);
            let entries: Vec<(String, HashMap<String, String>)> =
                self.client.xrange(partition.primary(), "-", "+", None).await?;
            let rows = entries
                .iter()
                .map(|(id, fields)| {
                    let envelope: Envelope =
                        serde_json::from_str(fields.get("envelope").context("an envelope")?)?;
                    envelope
                        .payload
                        .parse::<u8>()
                        .with_context(|| format!("entry {id}"))
                })
                .collect::<anyhow::Result<Vec<u8>>>()?;
            observed.streams.push(rows);
            let fields: HashMap<String, String> =
                self.client.hgetall(partition.producers(Lane::Primary)).await?;
            let mut last = BTreeMap::new();
            for (producer, value) in fields {
                let seq = value.split_once(':').context("<sequence>:<ms>")?.0.parse()?;
                last.insert(producer, seq);
            }
            observed.last.push(last);
        }
        Ok(observed)
    }
}

/// What the model says (or Redis holds): each stream's rows, each stream's
/// producers' last sequences.
#[derive(Debug, Default, PartialEq, Eq)]
struct Observed {
    streams: Vec<Vec<u8>>,
    last: Vec<BTreeMap<String, u8>>,
}

fn expected(state: &PublishState) -> Observed {
    Observed {
        streams: state.streams.clone(),
        last: state
            .last
            .iter()
            .map(|producers| {
                producers
                    .iter()
                    .enumerate()
                    .filter(|(_, seq)| **seq > 0)
                    .map(|(id, seq)| (Real::producer(id as u8), *seq))
                    .collect()
            })
            .collect(),
    }
}

/// Plays `choices` as a history of the model (each picks one of the
/// actions enabled), carrying out every call Redis carries out on the real
/// script and comparing after each. Returns how many calls were compared.
async fn replay(
    url: &str,
    case: u64,
    choices: &[u16],
    mutant: Option<PublishMutant>,
) -> anyhow::Result<usize> {
    let model = Publish {
        config: CONFIG,
        mutant,
    };
    let client = Builder::from_config(FredConfig::from_url(url)?).build_pool(1)?;
    client.init().await?;
    let real = Real {
        broker: RedisBroker::builder(url).pool_size(1).build().await?,
        client,
        category: format!("pubconf{case}"),
    };
    let mut state = model.init_states().remove(0);
    let mut history = Vec::new();
    let mut compared = 0;
    for &choice in choices {
        let mut actions = Vec::new();
        model.actions(&state, &mut actions);
        if actions.is_empty() {
            break;
        }
        let action = actions[usize::from(choice) % actions.len()];
        let Some(next) = model.next_state(&state, action) else {
            continue;
        };
        history.push(action.to_string());
        if let Action::Execute { which, failed_at } = action {
            let call = match which {
                Which::Current(i) => state.calls.get(i).context("a call in flight")?,
                Which::Late(i) => &state.late[i],
            };
            let upto = failed_at.map_or(call.rows.len(), usize::from);
            // The model's answer to a call of the processor's; a late call's
            // reply goes to no one, and the model keeps none.
            let answer = match which {
                Which::Current(i) => next.calls[i].reply,
                Which::Late(_) => None,
            };
            let published = real.execute(&state, call, upto).await?;
            let gap = |error: &ordo_core::contract::broker::PublishError| {
                error.source.to_string().contains("`gap`")
            };
            let agrees = match (&published, answer) {
                (Ok(()), Some(Reply::Done | Reply::Failed(_)) | None) => true,
                (Err(error), Some(Reply::Gap(_)) | None) => gap(error),
                _ => false,
            };
            if !agrees {
                bail!("after {history:#?}\nthe model answers {answer:?}, the broker {published:?}");
            }
            let (want, got) = (expected(&next), real.observe(CONFIG.streams).await?);
            if want != got {
                bail!(
                    "after {history:#?}\nthe model holds {want:?}\nRedis holds {got:?}",
                    history = history
                );
            }
            compared += 1;
        }
        state = next;
    }
    Ok(compared)
}

/// Runs `cases` random histories (with `mutant` seeded in the model);
/// returns the first failure, shrunk, and how many calls were compared.
fn run(redis: &Redis, cases: u32, mutant: Option<PublishMutant>) -> (Result<(), String>, usize) {
    let url = redis.url();
    static CASE: AtomicU64 = AtomicU64::new(0);
    let compared = AtomicU64::new(0);
    let mut runner = support::runner(cases);
    let outcome = runner.run(&vec(any::<u16>(), 10..120), |choices| {
        let case = CASE.fetch_add(1, Ordering::Relaxed);
        let calls = support::runtime()
            .block_on(replay(&url, case, &choices, mutant))
            .map_err(|error| TestCaseError::fail(format!("{error:#}")))?;
        compared.fetch_add(calls as u64, Ordering::Relaxed);
        Ok(())
    });
    (
        outcome.map_err(|error| error.to_string()),
        compared.load(Ordering::Relaxed) as usize,
    )
}

#[test]
fn the_real_publish_script_deduplicates_as_the_model_says() {
    let (outcome, compared) = run(&support::redis(), 128, None);
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
    // Histories that never reach Redis would prove nothing.
    assert!(compared >= 128, "only {compared} calls compared");
}

/// The comparison has teeth: a model whose script appends a sequence equal
/// to the last one (a resend after a lost reply) departs from the real
/// script, and the test finds a history that shows it, shrunk.
#[test]
fn a_publish_model_with_a_seeded_defect_departs_from_the_real_script() {
    let (outcome, _) = run(&support::redis(), 128, Some(PublishMutant::DedupAcceptsEqual));
    let failure = outcome.expect_err("the real script drops a resend of the last sequence");
    assert!(failure.contains("Redis holds"), "{failure}");
}

/// The gap check has teeth too: a model whose script ignores `prev` departs
/// from the real script once a call's earlier row of a stream failed while
/// a later one was out.
#[test]
fn a_publish_model_without_the_gap_check_departs_from_the_real_script() {
    let (outcome, _) = run(&support::redis(), 256, Some(PublishMutant::NoGapCheck));
    let failure = outcome.expect_err("the real script refuses a publication whose previous one is not in");
    assert!(
        failure.contains("Redis holds") || failure.contains("the broker"),
        "{failure}"
    );
}
