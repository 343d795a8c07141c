//! The model is the code: random histories drawn from the model's action
//! space run against the real Lua scripts on a real Redis, through the
//! runtime's own key module and script wrappers (`PartitionKeys`,
//! `Partitions`, `RedisFence`, `PartitionAdmin`, the broker's publish), and
//! after every step Redis's state and every reply must be the model's.
//!
//! Time is real: a member key expires when the model says the lease
//! holder's member may (its process is stalled, down or gone) by not being
//! renewed and running out its TTL, while the lease value stays; every
//! other member the model holds alive is renewed before each step (and
//! while that one runs out), as each process's heartbeat does. A mismatch
//! fails with the shortest history proptest can shrink to.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fred::clients::Pool;
use fred::interfaces::LuaInterface;
use fred::prelude::{Builder, Config as FredConfig};
use fred::types::Value;
use ordo_core::contract::broker::{Broker, Publication};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::{Envelope, MessageKind, Metadata};
use ordo_model::protocol::{Command, Identity, LeaseValue, Op, Reply};
use ordo_model::{Action, Config, Mutant, Protocol, State};
use ordo_redis::internals::{Ack, Lease, Partitions, ReadOutcome};
use ordo_redis::{Error as RedisError, FencedWrite, PartitionKeys, RedisBroker, RedisFence};
use ordo_testkit::Redis;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use stateright::Model;

/// What each history may contain: every fault the model knows except a
/// Redis restart losing writes (the testkit's Redis keeps nothing on disk).
const CONFIG: Config = Config {
    instances: 2,
    messages: 3,
    crashes: 1,
    stalls: 1,
    timeouts: 1,
    kills: 1,
    poisons: 1,
    errors: 1,
    resolutions: 2,
    aof_losses: 0,
    window: 0,
};

/// Short, so the model's member expiries cost little real time; long enough
/// that a member renewed before every step never lapses between two steps.
const LEASE_TTL: Duration = Duration::from_millis(800);

const GROUP: &str = "G";

/// Reads, in one call, everything of the partition the model describes
/// (the member keys, in another slot, are read on their own).
const SNAPSHOT: &str = r"
local lease, primary, index, effects, halt, gen = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local member, group = ARGV[1], ARGV[2]
local exists = redis.call('EXISTS', primary)
local pending, delivered, first = {}, '', ''
if exists == 1 then
  for _, raw in ipairs(redis.call('XINFO', 'GROUPS', primary)) do
    local info = {}
    for i = 1, #raw, 2 do info[raw[i]] = raw[i + 1] end
    if info['name'] == group then
      delivered = info['last-delivered-id']
      for _, entry in ipairs(redis.call('XPENDING', primary, group, '-', '+', 100)) do
        pending[#pending + 1] = entry[1]
      end
    end
  end
  local head = redis.call('XRANGE', primary, '-', '+', 'COUNT', 1)
  if head[1] then first = head[1][1] end
end
return {
  redis.call('GET', lease) or '',
  exists,
  redis.call('SISMEMBER', index, member),
  redis.call('LRANGE', effects, 0, -1),
  redis.call('HGET', halt, 'head') or '',
  pending,
  delivered,
  first,
  redis.call('GET', gen) or '',
}
";

/// Redis's side of the model's state.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    lease: Option<String>,
    /// The generation key: the token of the last release.
    generation: Option<String>,
    /// Whether the member key of each process start that registered one
    /// exists.
    members: BTreeMap<Identity, bool>,
    stream: bool,
    indexed: bool,
    effects: Vec<String>,
    halted: Option<String>,
    acked: Vec<bool>,
    /// Failed attempts counted with their entries so far.
    counted: u8,
}

/// A stream id as (ms, seq), for comparing.
fn id(text: &str) -> (u64, u64) {
    let (ms, seq) = text.split_once('-').unwrap_or((text, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

/// The real system the model's history is replayed on.
struct Real {
    pool: Pool,
    broker: RedisBroker,
    category: String,
    partition: PartitionKeys,
    effects: String,
    /// One owner per process start (instance id and nonce) of the model.
    owners: HashMap<Identity, Partitions>,
    /// The member key of each process start that registered one (its
    /// first acquire does).
    members: BTreeMap<Identity, String>,
    /// The real lease behind each lease value the model handed out.
    leases: HashMap<LeaseValue, Lease>,
    /// The stream id of each published message, by the model's number.
    ids: Vec<String>,
    /// How many closes counted a failure with its entry.
    counted: u8,
}

impl Real {
    async fn new(url: &str, case: u64) -> anyhow::Result<Self> {
        let pool = Builder::from_config(FredConfig::from_url(url)?).build_pool(2)?;
        fred::interfaces::ClientLike::init(&pool).await?;
        let broker = RedisBroker::builder(url).build().await?;
        let category = format!("conformance{case}x{}", std::process::id());
        let partition = PartitionKeys::new(&category, "k", "backfill");
        let effects = format!("{{{}}}:effects", partition.primary());
        Ok(Self {
            pool,
            broker,
            category,
            partition,
            effects,
            owners: HashMap::new(),
            members: BTreeMap::new(),
            leases: HashMap::new(),
            ids: Vec::new(),
            counted: 0,
        })
    }

    fn owner(&mut self, who: Identity) -> &Partitions {
        let pool = self.pool.clone();
        self.owners
            .entry(who)
            .or_insert_with(|| Partitions::new(pool, format!("i{}", who.instance), LEASE_TTL))
    }

    fn lease(&self, value: LeaseValue) -> anyhow::Result<Lease> {
        self.leases
            .get(&value)
            .cloned()
            .with_context(|| format!("the model used lease {value:?}, which Redis never handed out"))
    }

    fn message(&self, entry_id: &str) -> anyhow::Result<u8> {
        let n = self
            .ids
            .iter()
            .position(|id| id == entry_id)
            .with_context(|| format!("Redis returned entry {entry_id}, which was never published"))?;
        Ok(u8::try_from(n)?)
    }

    async fn publish(&mut self, seq: u8) -> anyhow::Result<()> {
        let envelope = Envelope {
            id: format!("{}-{seq}", self.category),
            kind: MessageKind::Event,
            type_name: "Happened".to_owned(),
            category: self.category.clone(),
            aggregate_id: Some("k".to_owned()),
            routing_key: None,
            partition_key: Some("k".to_owned()),
            metadata: Metadata::new(),
            occurred_at: None,
            correlation_id: None,
            causation_id: None,
            payload: format!("{{\"seq\":{seq}}}").into(),
        };
        let publication = Publication::to_partition("k", Lane::Primary, envelope);
        self.broker.publish(&[publication]).await?;
        let newest: Value = self
            .pool
            .eval(
                "local e = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1) return e[1][1]",
                vec![self.partition.primary().to_owned()],
                Vec::<Value>::new(),
            )
            .await?;
        self.ids.push(newest.as_string().context("the new entry's id")?);
        Ok(())
    }

    /// Runs `command` through the runtime's wrapper of its script and
    /// answers as the model's Redis would; `state` is the model's before it.
    async fn apply(&mut self, command: Command, state: &State) -> anyhow::Result<Reply> {
        let group = GROUP;
        Ok(match command.op {
            // A dead member acquires nothing. The runtime's acquire would
            // renew the member, find it expired and go on under a new nonce,
            // which the model plays as the process rejoining, then
            // acquiring: here its key must be gone.
            Op::Acquire if state.dead.contains(&command.from) => {
                if let Some(member) = self.members.get(&command.from)
                    && self.exists(member).await?
                {
                    bail!(
                        "the model's member {:?} is dead, Redis still has its key {member}",
                        command.from
                    );
                }
                Reply::Busy
            }
            Op::Acquire => {
                let partition = self.partition.clone();
                let (acquired, moved, member) = {
                    let owner = self.owner(command.from);
                    let before = owner.identity().to_owned();
                    let acquired = match owner.acquire(group, &partition).await {
                        // Another start of the same instance id holds it: not
                        // adopted (the runtime also reports the misconfiguration).
                        Err(RedisError::DuplicateInstance { .. }) => None,
                        other => other?,
                    };
                    let moved = (owner.identity() != before).then(|| owner.identity().to_owned());
                    (acquired, moved, owner.member_key())
                };
                if let Some(now) = moved {
                    bail!(
                        "the member of {:?} lapsed unseen: the runtime went on as {now}",
                        command.from
                    );
                }
                // The first acquire registers the member.
                self.members.entry(command.from).or_insert(member);
                match acquired {
                    Some(lease) => {
                        let value = LeaseValue {
                            holder: command.from,
                            token: self.token_of(&lease),
                        };
                        self.leases.entry(value).or_insert(lease);
                        Reply::Acquired(value)
                    }
                    None => Reply::Busy,
                }
            }
            Op::Read(value) => {
                let lease = self.lease(value)?;
                let partition = self.partition.clone();
                match self.owner(command.from).read(&lease, group, &partition, 1).await {
                    Ok(ReadOutcome::Entries { entries, .. }) => {
                        let head = entries.first().context("a read with no entry")?;
                        let msg = self.message(head.id())?;
                        Reply::Entry {
                            msg,
                            authorized: true,
                            batch: 1 << msg,
                        }
                    }
                    Ok(ReadOutcome::Halted { .. }) => Reply::Halted,
                    Ok(ReadOutcome::Idle(_)) => Reply::Idle { drained: true },
                    Ok(ReadOutcome::Gone) => Reply::Idle { drained: false },
                    Ok(other) => bail!("unexpected read outcome {other:?}"),
                    Err(error) => refusal(error)?,
                }
            }
            Op::Commit {
                lease,
                msg,
                attempt,
                id,
            } => {
                // As the partition worker builds it: the run of one message.
                let fence = RedisFence::for_attempt(&self.lease(lease)?, u64::from(attempt))
                    .handling(&format!("m-{msg}"));
                let writes = FencedWrite::new().rpush(&self.effects, msg.to_string());
                let commit_id = format!("{}.{}.{id}", command.from.instance, command.from.nonce);
                match fence.commit_as(&self.pool, &writes, &commit_id).await {
                    Ok(_) => Reply::Ok,
                    Err(error) => refusal(error)?,
                }
            }
            Op::Ack { lease, msg, attempt } => {
                let lease = self.lease(lease)?;
                let entry = self.ids[usize::from(msg)].clone();
                let partition = self.partition.clone();
                // As the partition worker acknowledges a message whose runs
                // committed: what it applied goes out of the marker.
                let message = format!("m-{msg}");
                let ack = Ack::new(&lease, group, &partition, Lane::Primary, &[&entry])
                    .closing(u64::from(attempt))
                    .forgetting(Some(&message));
                let acked = self.owner(command.from).acknowledge(&[ack]).await;
                match acked.map(|mut outcomes| outcomes.pop()) {
                    Ok(Some(Ok(_))) => Reply::Ok,
                    Ok(Some(Err(error))) | Err(error) => refusal(error)?,
                    Ok(None) => bail!("no outcome for the acknowledgement"),
                }
            }
            Op::Close {
                lease,
                attempt,
                count: None,
            } => {
                let lease = self.lease(lease)?;
                match self
                    .owner(command.from)
                    .close_attempt(&lease, u64::from(attempt))
                    .await
                {
                    Ok(()) => Reply::Ok,
                    Err(error) => refusal(error)?,
                }
            }
            // An ordinary error: the close counts the failure with the entry,
            // once (a resent or late close counts nothing).
            Op::Close {
                lease,
                attempt,
                count: Some(msg),
            } => {
                let lease = self.lease(lease)?;
                let entry = self.ids[usize::from(msg)].clone();
                let partition = self.partition.clone();
                let owner = self.owner(command.from);
                let before = owner.failed_attempts(group, &partition, &entry).await?;
                match owner
                    .attempt_failed(&lease, group, &partition, &entry, u64::from(attempt))
                    .await
                {
                    Ok(after) => {
                        if after > before {
                            self.counted += 1;
                        }
                        Reply::Ok
                    }
                    Err(error) => refusal(error)?,
                }
            }
            Op::Release(value) => {
                let lease = self.lease(value)?;
                self.owner(command.from).release(&lease).await?;
                Reply::Ok
            }
            Op::Reap(value) => {
                let lease = self.lease(value)?;
                let partition = self.partition.clone();
                match self
                    .owner(command.from)
                    .reap(&lease, &partition, Duration::ZERO)
                    .await
                {
                    Ok(_) => Reply::Ok,
                    Err(error) => refusal(error)?,
                }
            }
            Op::Halt {
                lease, msg, attempt, ..
            } => {
                let lease = self.lease(lease)?;
                let reason = ordo_redis::internals::HaltReason {
                    lane: Lane::Primary,
                    head: self.ids[usize::from(msg)].clone(),
                    error: "poison".to_owned(),
                    attempts: 1,
                };
                let partition = self.partition.clone();
                let halted = self
                    .owner(command.from)
                    .halt_attempt(&lease, group, &partition, &reason, u64::from(attempt))
                    .await;
                match halted {
                    Ok(()) => Reply::Ok,
                    Err(error) => refusal(error)?,
                }
            }
            Op::Resolve { seen, skip } => {
                let admin = self.broker.admin();
                let head = admin
                    .head(group, &self.category, "k")
                    .expecting(&self.ids[usize::from(seen)]);
                let decided = if skip {
                    head.skip().await
                } else {
                    head.retry().await
                };
                match decided {
                    Ok(_) | Err(RedisError::HeadChanged { .. } | RedisError::NotHalted { .. }) => Reply::Ok,
                    Err(error) => return Err(error.into()),
                }
            }
        })
    }

    /// The model numbers tokens 1, 2, 3...; Redis's grow with its clock.
    /// Both grow with every new owner, which is all the model relies on:
    /// the model's token for a real lease is its rank among those seen.
    fn token_of(&self, lease: &Lease) -> u8 {
        if let Some((value, _)) = self
            .leases
            .iter()
            .find(|(_, known)| known.value() == lease.value())
        {
            return value.token;
        }
        let newer = self
            .leases
            .values()
            .filter(|known| known.token() < lease.token())
            .count();
        u8::try_from(newer + 1).unwrap_or(u8::MAX)
    }

    /// Renews every registered member the model holds alive but `except`,
    /// each with the lease when it is the holder, as each process's
    /// heartbeat does. A stalled, crashed or stopped process's member too:
    /// in the model a member expires only when the model says so, and one
    /// that lapsed on its own would leave the model.
    async fn heartbeat(&self, state: &State, except: Option<Identity>) -> anyhow::Result<()> {
        for who in self.members.keys() {
            if state.dead.contains(who) || Some(*who) == except {
                continue;
            }
            let held = match state.lease {
                Some(value) if value.holder == *who => vec![self.lease(value)?],
                _ => Vec::new(),
            };
            let owner = self.owners.get(who).context("a member without its owner")?;
            let lost = owner.renew(&held).await?;
            if !lost.is_empty() {
                bail!(
                    "{who:?} lost {:?} between two steps (member TTL too short for this machine?)",
                    state.lease
                );
            }
        }
        Ok(())
    }

    /// Waits until the member key of `value`'s holder has run out its TTL
    /// (nothing is deleted: the lease value stays), renewing the others
    /// meanwhile.
    async fn expire(&self, state: &State, value: LeaseValue) -> anyhow::Result<()> {
        let member = self
            .members
            .get(&value.holder)
            .with_context(|| format!("the holder of {value:?} never registered a member"))?;
        let deadline = Instant::now() + LEASE_TTL * 4;
        let mut renewed: Option<Instant> = None;
        loop {
            if renewed.is_none_or(|at| at.elapsed() >= LEASE_TTL / 4) {
                self.heartbeat(state, Some(value.holder)).await?;
                renewed = Some(Instant::now());
            }
            if !self.exists(member).await? {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the member of {value:?} did not expire within {:?}",
                    LEASE_TTL * 4
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether `key` exists.
    async fn exists(&self, key: &str) -> anyhow::Result<bool> {
        let count: i64 = fred::interfaces::KeysInterface::exists(&self.pool, key).await?;
        Ok(count > 0)
    }

    async fn observe(&self) -> anyhow::Result<Observed> {
        let lease = self.partition.lease(GROUP);
        let keys = vec![
            lease.lease,
            self.partition.primary().to_owned(),
            self.partition.index(),
            self.effects.clone(),
            self.partition.halt(GROUP),
            lease.generation,
        ];
        let reply: Vec<Value> = self
            .pool
            .eval(SNAPSHOT, keys, vec![Value::from("k"), Value::from(GROUP)])
            .await?;
        let text = |value: &Value| value.as_string().unwrap_or_default();
        let some = |value: &Value| Some(text(value)).filter(|t| !t.is_empty());
        let list = |value: &Value| -> Vec<String> {
            match value {
                Value::Array(items) => items.iter().map(|v| v.as_string().unwrap_or_default()).collect(),
                _ => Vec::new(),
            }
        };
        let stream = reply[1].as_i64() == Some(1);
        let pending = list(&reply[5]);
        let delivered = text(&reply[6]);
        let first = text(&reply[7]);
        let acked = self
            .ids
            .iter()
            .map(|entry| {
                if pending.contains(entry) {
                    false
                } else if !stream || (!first.is_empty() && id(entry) < id(&first)) {
                    true // reaped or trimmed: trimming removes acknowledged entries only
                } else {
                    !delivered.is_empty() && id(entry) <= id(&delivered)
                }
            })
            .collect();
        let mut members = BTreeMap::new();
        for (who, member) in &self.members {
            members.insert(*who, self.exists(member).await?);
        }
        Ok(Observed {
            lease: some(&reply[0]),
            generation: some(&reply[8]),
            members,
            stream,
            indexed: reply[2].as_i64() == Some(1),
            effects: list(&reply[3]),
            halted: some(&reply[4]),
            acked,
            counted: self.counted,
        })
    }

    /// The model's state as Redis would show it.
    fn expected(&self, state: &State) -> anyhow::Result<Observed> {
        Ok(Observed {
            lease: state
                .lease
                .map(|value| self.lease(value))
                .transpose()?
                .map(|l| l.value().to_owned()),
            generation: state
                .generation_key
                .map(|token| {
                    self.leases
                        .iter()
                        .find(|(value, _)| value.token == token)
                        .map(|(_, lease)| lease.token().to_string())
                        .with_context(|| {
                            format!("the model released token {token}, which Redis never handed out")
                        })
                })
                .transpose()?,
            members: self
                .members
                .keys()
                .map(|who| (*who, !state.dead.contains(who)))
                .collect(),
            stream: state.stream,
            indexed: state.indexed,
            effects: state.effects.iter().map(u8::to_string).collect(),
            halted: state.halted.map(|m| self.ids[usize::from(m)].clone()),
            acked: (0..self.ids.len()).map(|m| state.acked & (1 << m) != 0).collect(),
            counted: state.counted,
        })
    }
}

/// A refusal as the model's reply; anything else is an error.
fn refusal(error: RedisError) -> anyhow::Result<Reply> {
    match error {
        RedisError::Fenced { .. } => Ok(Reply::Fenced),
        RedisError::Stale { .. } => Ok(Reply::Stale),
        other => Err(other.into()),
    }
}

/// What a step from `state` exercised, for the coverage check.
fn kind(action: Action, state: &State) -> &'static str {
    match action {
        Action::Apply(command, _) => match command.op {
            Op::Acquire
                if !state.dead.contains(&command.from)
                    && state.lease.is_some_and(|held| state.dead.contains(&held.holder)) =>
            {
                "takeover"
            }
            Op::Acquire => "acquire",
            Op::Read(_) => "read",
            Op::Commit { .. } => "commit",
            Op::Ack { .. } => "ack",
            Op::Close { .. } => "close",
            Op::Release(_) => "release",
            Op::Reap(_) => "reap",
            Op::Halt { .. } => "halt",
            Op::Resolve { .. } => "resolve",
        },
        Action::Publish => "publish",
        Action::Expire => "expire",
        Action::Rejoin(_) => "rejoin",
        _ => "client-side",
    }
}

/// Replays the history chosen by `choices` on the model (with `mutant`
/// seeded) and on Redis, comparing after every step; returns what each
/// step exercised.
async fn replay(
    url: &str,
    case: u64,
    choices: &[u16],
    mutant: Option<Mutant>,
) -> anyhow::Result<Vec<&'static str>> {
    let model = Protocol {
        config: if let Some(mutant) = mutant {
            Config::exposing(mutant)
        } else {
            CONFIG
        },
        mutant,
    };
    let mut state = model.init_states().remove(0);
    let mut real = Real::new(url, case).await?;
    let mut history: Vec<String> = Vec::new();
    let mut actions = Vec::new();
    let mut exercised = Vec::new();
    for &choice in choices {
        actions.clear();
        model.actions(&state, &mut actions);
        if actions.is_empty() {
            break;
        }
        let action = actions[usize::from(choice) % actions.len()];
        let Some(next) = model.next_state(&state, action) else {
            continue;
        };
        history.push(action.to_string());
        exercised.push(kind(action, &state));
        if !matches!(action, Action::Expire) {
            real.heartbeat(&state, None).await?;
        }
        match action {
            Action::Publish => real.publish(state.published).await?,
            Action::Apply(command, _) => {
                let mut modelled = state.clone();
                let expected = model.apply(&mut modelled, command);
                let answered = real
                    .apply(command, &state)
                    .await
                    .with_context(|| format!("after:\n  {}", history.join("\n  ")))?;
                if answered != expected {
                    bail!(
                        "Redis answered {answered:?}, the model {expected:?}, to the last step of:\n  {}",
                        history.join("\n  ")
                    );
                }
            }
            Action::Expire => {
                let value = state.lease.context("expiry without a lease")?;
                real.expire(&state, value).await?;
            }
            _ => {}
        }
        state = next;
        let observed = real.observe().await?;
        let mut expected = real.expected(&state)?;
        // The generation key lives a while after the release (ten lease
        // TTLs), then expires: gone, it may only have run out.
        if observed.generation.is_none() {
            expected.generation = None;
        }
        if observed != expected {
            bail!(
                "Redis's state left the model's:\n  Redis: {observed:?}\n  model: {expected:?}\nhistory:\n  {}",
                history.join("\n  ")
            );
        }
    }
    Ok(exercised)
}

/// Runs `cases` random histories (with `mutant` seeded in the model) on
/// `redis`; returns the first failure, shrunk, and what the histories
/// exercised.
fn run(
    redis: &Redis,
    cases: u32,
    mutant: Option<Mutant>,
) -> (Result<(), String>, BTreeMap<&'static str, usize>) {
    let url = redis.url();
    let exercised = Mutex::new(BTreeMap::new());
    // Every history gets a category of its own, across tests.
    static CASE: AtomicU64 = AtomicU64::new(0);
    let mut runner = support::runner(cases);
    let outcome = runner.run(&vec(any::<u16>(), 20..300), |choices| {
        let case = CASE.fetch_add(1, Ordering::Relaxed);
        let steps = support::runtime()
            .block_on(replay(&url, case, &choices, mutant))
            .map_err(|error| TestCaseError::fail(format!("{error:#}")))?;
        let mut exercised = exercised.lock().expect("not poisoned");
        for step in steps {
            *exercised.entry(step).or_insert(0) += 1;
        }
        Ok(())
    });
    let outcome = outcome.map_err(|error| error.to_string());
    (outcome, exercised.into_inner().expect("not poisoned"))
}

/// Every operation the histories must reach.
const KINDS: [&str; 12] = [
    "publish", "acquire", "read", "commit", "ack", "close", "release", "reap", "halt", "resolve", "expire",
    "takeover",
];

#[test]
fn the_real_scripts_do_what_the_model_says() {
    // Random histories that never reach an operation would prove nothing:
    // rounds of 96 histories run until every operation was reached (a rare
    // one, such as `close`, can be missed by one round), four at most.
    let redis = support::redis();
    let mut exercised: BTreeMap<&'static str, usize> = BTreeMap::new();
    for _ in 0..4 {
        let (outcome, round) = run(&redis, 96, None);
        if let Err(failure) = outcome {
            panic!("{failure}");
        }
        for (kind, count) in round {
            *exercised.entry(kind).or_insert(0) += count;
        }
        if KINDS.iter().all(|kind| exercised.contains_key(kind)) {
            break;
        }
    }
    eprintln!("exercised: {exercised:?}");
    for kind in KINDS {
        assert!(
            exercised.get(kind).copied().unwrap_or(0) > 0,
            "no history exercised `{kind}`: {exercised:?}"
        );
    }
}

/// A model whose commit applies a message's effect again when the message
/// runs again (the runtime before fenced commits were applied once per
/// message) departs from the real scripts.
#[test]
fn a_model_that_applies_a_run_again_departs_from_the_real_scripts() {
    let (outcome, _) = run(&support::redis(), 256, Some(Mutant::CommitWithoutAppliedCheck));
    let failure = outcome.expect_err("the real commit script applies a message's commit once");
    assert!(failure.contains("Redis's state left the model's"), "{failure}");
}

/// The comparison has teeth: a model with a seeded defect (a lease adopted
/// by instance id alone, without the process's nonce) departs from the real
/// scripts, and the test finds a history that shows it, shrunk.
#[test]
fn a_model_with_a_seeded_defect_departs_from_the_real_scripts() {
    let (outcome, _) = run(&support::redis(), 64, Some(Mutant::LeaseWithoutNonce));
    let failure = outcome.expect_err("the real acquire script tells two starts of one instance apart");
    assert!(failure.contains("Redis answered Busy"), "{failure}");
}
