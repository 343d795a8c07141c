//! Pausing a handler while a dependency is down: one circuit breaker per
//! handler and process.
//!
//! - **Closed** (flowing): every attempt's outcome is counted in a sliding
//!   window of [`WINDOW`]. When at least `pause_min_keys` keys failed
//!   transiently in it, and transient failures outnumber the attempts that
//!   got an answer (successes and ordinary failures), the breaker opens.
//! - **Open** (paused): no attempt starts, on any key of the handler in
//!   this process, except one **probe** at a time, after a growing,
//!   jittered interval (the handler's retry backoff doubled from its
//!   initial delay up to at least [`PROBE_CAP`]). A probe, or any attempt
//!   still in flight, that gets an answer closes the breaker: every waiting
//!   key resumes at once. A probe that fails transiently waits longer.
//!
//! Keys wait in order meanwhile: nothing is skipped, and the broker keeps
//! its leases. A key whose own outage passes `max_transient_ms` while it
//! waits gives up (its partition halts with that reason).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::contract::backoff::Backoff;
use crate::contract::log_events;

/// How far back the breaker looks.
pub const WINDOW: Duration = Duration::from_secs(30);

/// Buckets of the window (it slides by `WINDOW / BUCKETS`).
const BUCKETS: usize = 6;

/// The least cap of the probe interval, whatever the retry backoff's cap.
pub const PROBE_CAP: Duration = Duration::from_secs(30);

/// How many failing keys the window remembers (enough to count to any
/// sensible `pause_min_keys`).
const TRACKED_KEYS: usize = 1024;

/// The circuit breaker of one handler in this process (see the module
/// documentation).
pub struct Breaker {
    handler: String,
    min_keys: u32,
    probe: Backoff,
    state: Mutex<State>,
    /// Whether it is paused (what `state` says), read without the lock on
    /// the path of every attempt.
    paused: AtomicBool,
    /// Bumped at every change of state, for the keys waiting to start.
    changed: watch::Sender<u64>,
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("handler", &self.handler)
            .field("min_keys", &self.min_keys)
            .field("paused", &self.status().is_some())
            .finish_non_exhaustive()
    }
}

/// What the breaker keeps.
struct State {
    origin: Instant,
    buckets: [Bucket; BUCKETS],
    /// Keys that failed transiently, and when they last did.
    failing: HashMap<u64, Instant>,
    paused: Option<Paused>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    epoch: u64,
    answered: u64,
    transient: u64,
}

struct Paused {
    since: SystemTime,
    reason: String,
    probes: u32,
    next_probe: Instant,
    probing: bool,
}

/// An attempt's outcome, as the breaker counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Observed {
    /// The handler succeeded.
    Succeeded,
    /// It failed, but not transiently: its dependencies answered.
    Failed,
    /// It failed transiently.
    Transient,
}

/// A paused handler, as health reports and `ordo status` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PauseStatus {
    /// When it paused.
    pub since: SystemTime,
    /// Why: how many keys failed transiently, and the last error.
    pub reason: String,
    /// How many probes failed since.
    pub probes: u32,
}

impl fmt::Display for PauseStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let paused_for = SystemTime::now().duration_since(self.since).unwrap_or_default();
        write!(
            f,
            "paused for {} s ({} probes failed): {}",
            paused_for.as_secs(),
            self.probes,
            self.reason
        )
    }
}

/// Whether an attempt may start.
#[derive(Debug)]
pub(crate) enum Admission {
    /// It may; as the probe of a paused handler when it holds a ticket.
    Go(Option<Probe>),
    /// The deadline passed while the handler was paused.
    Expired,
}

/// The right to run the one probe of a paused handler; given back when
/// dropped without an outcome (the attempt was abandoned).
#[derive(Debug)]
pub(crate) struct Probe {
    breaker: Arc<Breaker>,
    armed: bool,
}

impl Drop for Probe {
    fn drop(&mut self) {
        if self.armed {
            let mut state = self.breaker.state();
            if let Some(paused) = &mut state.paused {
                paused.probing = false;
            }
            drop(state);
            self.breaker.bump();
        }
    }
}

impl Breaker {
    /// The breaker of `handler`: opens when at least `min_keys` keys fail
    /// transiently (0: never), probes at intervals of `backoff` (capped at
    /// no less than [`PROBE_CAP`]).
    pub fn new(handler: impl Into<String>, min_keys: u32, backoff: Backoff) -> Self {
        let probe = Backoff::new(backoff.initial(), backoff.max().max(PROBE_CAP)).unwrap_or(backoff);
        Self {
            handler: handler.into(),
            min_keys,
            probe,
            state: Mutex::new(State {
                origin: Instant::now(),
                buckets: [Bucket::default(); BUCKETS],
                failing: HashMap::new(),
                paused: None,
            }),
            paused: AtomicBool::new(false),
            changed: watch::Sender::new(0),
        }
    }

    /// Whether it can ever pause (`pause_min_keys` is not 0).
    pub fn enabled(&self) -> bool {
        self.min_keys > 0
    }

    /// The pause, when the handler is paused in this process.
    pub fn status(&self) -> Option<PauseStatus> {
        self.state().paused.as_ref().map(|paused| PauseStatus {
            since: paused.since,
            reason: paused.reason.clone(),
            probes: paused.probes,
        })
    }

    /// Waits until an attempt may start: at once while flowing; while
    /// paused, until this attempt is the probe or the breaker closes, or
    /// until `deadline`.
    pub(crate) async fn admit(self: &Arc<Self>, deadline: Option<Instant>) -> Admission {
        // Flowing: nothing to wait for (a pause that begins right now lets
        // this attempt through, as one already running would be).
        if !self.enabled() || !self.paused.load(Ordering::Acquire) {
            return Admission::Go(None);
        }
        let mut changes = self.changed.subscribe();
        loop {
            changes.borrow_and_update();
            let wake_at = {
                let mut state = self.state();
                let Some(paused) = &mut state.paused else {
                    return Admission::Go(None);
                };
                let now = Instant::now();
                if deadline.is_some_and(|deadline| now >= deadline) {
                    return Admission::Expired;
                }
                if !paused.probing && now >= paused.next_probe {
                    paused.probing = true;
                    return Admission::Go(Some(Probe {
                        breaker: Arc::clone(self),
                        armed: true,
                    }));
                }
                let probe = (!paused.probing).then_some(paused.next_probe);
                match (probe, deadline) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            };
            let sleep = async {
                match wake_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = changes.changed() => {
                    // The sender lives as long as `self`.
                    let _ = changed;
                }
                () = sleep => {}
            }
        }
    }

    /// Resolves once the breaker closes (at once when it is closed).
    pub(crate) async fn resumed(&self) {
        let mut changes = self.changed.subscribe();
        loop {
            changes.borrow_and_update();
            if self.state().paused.is_none() {
                return;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Counts the outcome of an attempt on the key hashed to `key`; `probe`
    /// when it was the paused handler's probe. `error` is the failure's
    /// text (for the pause's reason).
    pub(crate) fn record(&self, key: u64, observed: Observed, probe: Option<Probe>, error: Option<&str>) {
        if !self.enabled() {
            return;
        }
        let was_probe = probe.is_some_and(|mut probe| std::mem::replace(&mut probe.armed, false));
        let mut state = self.state();
        let now = Instant::now();
        let changed = if state.paused.is_some() {
            self.record_paused(&mut state, now, observed, was_probe, error)
        } else {
            self.record_flowing(&mut state, now, key, observed, error)
        };
        drop(state);
        if changed || was_probe {
            self.bump();
        }
    }

    fn record_flowing(
        &self,
        state: &mut State,
        now: Instant,
        key: u64,
        observed: Observed,
        error: Option<&str>,
    ) -> bool {
        let bucket = state.bucket(now);
        match observed {
            Observed::Succeeded | Observed::Failed => {
                bucket.answered += 1;
                if !state.failing.is_empty() {
                    state.failing.remove(&key);
                }
                return false;
            }
            Observed::Transient => bucket.transient += 1,
        }
        if state.failing.len() < TRACKED_KEYS || state.failing.contains_key(&key) {
            state.failing.insert(key, now);
        }
        state.failing.retain(|_, at| now.duration_since(*at) < WINDOW);
        let keys = u32::try_from(state.failing.len()).unwrap_or(u32::MAX);
        let (answered, transient) = state.totals(now);
        if keys < self.min_keys || transient <= answered {
            return false;
        }
        let reason = format!(
            "{keys} keys failed transiently within {} s ({transient} transient failures, {answered} \
             answered attempts); last error: {}",
            WINDOW.as_secs(),
            error.unwrap_or("unknown")
        );
        tracing::warn!(event = log_events::HANDLER_PAUSED, handler = %self.handler, keys, transient, answered,
            reason = %reason, "handler paused: a dependency looks down; probing with one message at a time");
        state.paused = Some(Paused {
            since: SystemTime::now(),
            reason,
            probes: 0,
            next_probe: now + self.probe.delay(1),
            probing: false,
        });
        self.paused.store(true, Ordering::Release);
        true
    }

    fn record_paused(
        &self,
        state: &mut State,
        now: Instant,
        observed: Observed,
        was_probe: bool,
        error: Option<&str>,
    ) -> bool {
        let Some(paused) = &mut state.paused else {
            return false;
        };
        match observed {
            Observed::Succeeded | Observed::Failed => {
                let paused_for = SystemTime::now().duration_since(paused.since).unwrap_or_default();
                tracing::info!(event = log_events::HANDLER_RESUMED, handler = %self.handler,
                    paused_ms = u64::try_from(paused_for.as_millis()).unwrap_or(u64::MAX),
                    probes = paused.probes, "handler resumed: an attempt got an answer");
                state.paused = None;
                self.paused.store(false, Ordering::Release);
                state.failing.clear();
                state.buckets = [Bucket::default(); BUCKETS];
                true
            }
            Observed::Transient if was_probe => {
                paused.probes = paused.probes.saturating_add(1);
                paused.next_probe = now + self.probe.delay(paused.probes.saturating_add(1));
                paused.probing = false;
                if let Some(error) = error {
                    let base = paused.reason.split("; last error: ").next().unwrap_or_default();
                    paused.reason = format!("{base}; last error: {error}");
                }
                true
            }
            Observed::Transient => false,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update completes under the lock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl State {
    fn epoch(&self, now: Instant) -> u64 {
        let step = WINDOW.as_millis() / BUCKETS as u128;
        u64::try_from(now.duration_since(self.origin).as_millis() / step).unwrap_or(u64::MAX)
    }

    /// The current bucket, emptied when it last served an older epoch.
    fn bucket(&mut self, now: Instant) -> &mut Bucket {
        let epoch = self.epoch(now);
        let bucket = &mut self.buckets[usize::try_from(epoch % BUCKETS as u64).unwrap_or(0)];
        if bucket.epoch != epoch {
            *bucket = Bucket {
                epoch,
                ..Bucket::default()
            };
        }
        bucket
    }

    /// Answered and transient attempts in the window.
    fn totals(&self, now: Instant) -> (u64, u64) {
        let epoch = self.epoch(now);
        self.buckets
            .iter()
            .filter(|b| epoch.saturating_sub(b.epoch) < BUCKETS as u64)
            .fold((0, 0), |(a, t), b| (a + b.answered, t + b.transient))
    }
}
