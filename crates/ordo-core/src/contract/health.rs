//! Health and readiness as data: [`RunningDomain::health`](crate::RunningDomain::health)
//! reports, per subscription, whether it is `ok`, `lagging`, `paused`,
//! `halted` or in an `unknown` state, with the reasons, for probes and
//! dashboards.
//!
//! The thresholds are `[health]` in `domain.toml` (`max_lag`,
//! `max_pending_age_ms`). Each broker fills the report from what it knows
//! ([`Broker::health`](crate::Broker::health)): the inline broker from its
//! halted keys, the Redis broker from the same figures `ordo status`
//! shows (lag, the age of in-flight entries, halted partitions) plus its
//! lease renewals and whether Redis answers.
//!
//! For Kubernetes-style probes: [`HealthReport::live`] is false only when
//! the broker's consumer has stopped (restart the process);
//! [`HealthReport::ready`] is false when a subscription's state is
//! `unknown` (Redis unreachable, leases not renewing) or the consumer is not
//! running. A halted partition, a pause or a lag makes neither false:
//! restarting does not cure them (a halt is resolved by an operator, see
//! `ordo inspect`; a pause ends by itself when the dependency is back).

use std::fmt;

use serde::Serialize;

/// A subscription's state, from best to worst for sorting (`unknown` is
/// the worst: nothing is known to work).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// Consuming, within the thresholds.
    Ok,
    /// Behind: more undelivered entries than `max_lag`, or an entry in
    /// flight for longer than `max_pending_age_ms`.
    Lagging,
    /// The handler is paused on an instance because most of its keys fail
    /// transiently (a dependency looks down): it probes with one message at
    /// a time and resumes by itself (see [`crate::contract::retry::breaker`]).
    Paused,
    /// At least one partition (key) is halted on a poison message and waits
    /// for an operator.
    Halted,
    /// The state cannot be told: the broker cannot be reached, its leases
    /// are not being renewed, or it reports no health.
    Unknown,
}

impl HealthState {
    /// The lower-case name (`ok`, `lagging`, `paused`, `halted`, `unknown`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Lagging => "lagging",
            Self::Paused => "paused",
            Self::Halted => "halted",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for HealthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One subscription's (handler's) health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SubscriptionHealth {
    /// The handler's name (its consumer group).
    pub handler: String,
    /// The worst state found.
    pub state: HealthState,
    /// Why it is not `ok`, one line each (empty when `ok`).
    pub reasons: Vec<String>,
}

impl SubscriptionHealth {
    /// An `ok` subscription.
    pub fn ok(handler: impl Into<String>) -> Self {
        Self {
            handler: handler.into(),
            state: HealthState::Ok,
            reasons: Vec::new(),
        }
    }

    /// An `unknown` subscription, for `reason`.
    pub fn unknown(handler: impl Into<String>, reason: impl Into<String>) -> Self {
        let mut health = Self::ok(handler);
        health.degrade(HealthState::Unknown, reason);
        health
    }

    /// Records `reason` and makes the state at least `state`.
    pub fn degrade(&mut self, state: HealthState, reason: impl Into<String>) {
        self.state = self.state.max(state);
        self.reasons.push(reason.into());
    }
}

/// The health of a running domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthReport {
    /// The broker's name.
    pub broker: String,
    /// Whether the broker's consumer was started and has stopped since (it
    /// stops only on shutdown or on an error it cannot recover from).
    pub consumer_stopped: bool,
    /// Each subscription, in registration order.
    pub subscriptions: Vec<SubscriptionHealth>,
}

impl HealthReport {
    /// The worst state over the subscriptions (`ok` when there is none).
    pub fn state(&self) -> HealthState {
        self.subscriptions
            .iter()
            .map(|s| s.state)
            .max()
            .unwrap_or(HealthState::Ok)
    }

    /// The subscription named `handler`.
    pub fn subscription(&self, handler: &str) -> Option<&SubscriptionHealth> {
        self.subscriptions.iter().find(|s| s.handler == handler)
    }

    /// For a liveness probe: false only when the consumer stopped (a
    /// restart may help).
    pub fn live(&self) -> bool {
        !self.consumer_stopped
    }

    /// For a readiness probe: the consumer runs and no subscription is
    /// `unknown`. A halt, a pause or a lag keeps the process ready (see the
    /// module documentation).
    pub fn ready(&self) -> bool {
        self.live() && self.subscriptions.iter().all(|s| s.state != HealthState::Unknown)
    }
}
