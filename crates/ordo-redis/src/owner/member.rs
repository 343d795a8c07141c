//! Membership: one liveness key per process start, instead of a TTL on
//! every lease (Kafka's member heartbeat).
//!
//! A process start registers `{ordo}:member:<instance>:<nonce>` (`SET NX
//! PX`) before it takes its first lease, and its heartbeat renews it with
//! `PEXPIRE`, which never re-creates it: once the key has expired (the
//! process stalled, or could not reach Redis, for a TTL), this member is
//! dead for good. Its leases, which have no TTL, stay as they are until
//! another instance asks whether their holder is alive, finds its key gone
//! and takes them over. The process itself learns it at its next renewal
//! (0): it gives up every lease at once and goes on as a new member, under
//! a new nonce. Renewing with `SET` would bring a dead member back while
//! another instance takes its leases over (the model's
//! `renew-recreates-member` mutant: two live runs).
//!
//! The member is valid, by this process's own clock, until a TTL after the
//! start of its last successful registration or renewal; a worker starts a
//! handler only while it is (`run-without-member-check`).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use fred::interfaces::KeysInterface;

use super::lease::Owner;
use crate::error::Result;
use crate::store::calls;
use crate::store::keys;

/// This process's membership: the owner its leases name, whether its
/// member key is registered, and until when it is surely alive.
#[derive(Debug)]
pub(crate) struct Membership {
    ttl: Duration,
    state: Mutex<State>,
    /// Held by [`Membership::ensure`] for its whole call: two acquisitions
    /// at once must not both register (the second's `SET NX` would fail on
    /// the first's key and draw yet another nonce).
    ensuring: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct State {
    owner: Owner,
    /// Until when the member key surely exists (`None`: not registered, or
    /// found expired: the next [`Membership::ensure`] registers `owner`).
    valid_until: Option<Instant>,
}

/// What a renewal of the member key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Renewed: this owner's member is alive at least until then.
    Renewed(Owner, Instant),
    /// No member is registered (no lease has been taken yet).
    Unregistered,
    /// The member key had expired: every lease of this identity is lost;
    /// the next acquisition registers a new member.
    Expired(String),
}

impl Membership {
    /// The membership of a start of `instance` (a fresh nonce, not
    /// registered yet), whose member key lives `ttl` without renewal.
    pub(crate) fn new(instance: &str, ttl: Duration) -> Self {
        Self {
            ttl,
            state: Mutex::new(State {
                owner: Owner::new(instance),
                valid_until: None,
            }),
            ensuring: tokio::sync::Mutex::new(()),
        }
    }

    /// The owner its leases name now.
    pub(crate) fn owner(&self) -> Owner {
        self.lock().owner.clone()
    }

    /// The member key of the owner its leases name now.
    pub(crate) fn key(&self) -> String {
        keys::member(self.lock().owner.identity())
    }

    /// Makes sure the member key lives before leases are taken: renews it,
    /// or registers it (the first time, or under a new nonce once it has
    /// expired). Returns the owner to take leases as, and until when its
    /// member surely lives.
    pub(crate) async fn ensure<C>(&self, client: &C) -> Result<(Owner, Instant)>
    where
        C: KeysInterface + Send + Sync,
    {
        let _ensuring = self.ensuring.lock().await;
        if let Renewal::Renewed(owner, until) = self.renew(client).await? {
            return Ok((owner, until));
        }
        loop {
            let owner = self.owner();
            let key = keys::member(owner.identity());
            let started = Instant::now();
            if calls::lease::register(client, &key, owner.instance(), self.ttl).await? {
                let until = started + self.ttl;
                let mut state = self.lock();
                if state.owner == owner {
                    state.valid_until = Some(until);
                    return Ok((owner, until));
                }
            } else {
                // Another process start drew this nonce: draw another.
                self.expired(&owner);
            }
        }
    }

    /// Renews the member key (the heartbeat, or a tool driving leases by
    /// hand).
    pub(crate) async fn renew<C>(&self, client: &C) -> Result<Renewal>
    where
        C: KeysInterface + Send + Sync,
    {
        let owner = {
            let state = self.lock();
            if state.valid_until.is_none() {
                return Ok(Renewal::Unregistered);
            }
            state.owner.clone()
        };
        let started = Instant::now();
        if calls::lease::renew(client, &keys::member(owner.identity()), self.ttl).await? {
            let until = started + self.ttl;
            let mut state = self.lock();
            if state.owner == owner
                && let Some(valid_until) = &mut state.valid_until
            {
                *valid_until = (*valid_until).max(until);
                return Ok(Renewal::Renewed(owner, *valid_until));
            }
            return Ok(Renewal::Unregistered);
        }
        self.expired(&owner);
        Ok(Renewal::Expired(owner.identity().to_owned()))
    }

    /// Deletes the member key, after every lease was released or given up
    /// (a clean stop: the key goes last, or another instance could take a
    /// lease over while a run under it goes on); a later acquisition
    /// registers a new member.
    pub(crate) async fn leave<C>(&self, client: &C) -> Result<()>
    where
        C: KeysInterface + Send + Sync,
    {
        let owner = {
            let state = self.lock();
            if state.valid_until.is_none() {
                return Ok(());
            }
            state.owner.clone()
        };
        self.expired(&owner);
        calls::lease::leave(client, &keys::member(owner.identity())).await
    }

    /// `owner`'s member is gone: the next registration draws a new nonce
    /// (unless that happened already).
    fn expired(&self, owner: &Owner) {
        let mut state = self.lock();
        if state.owner == *owner {
            state.owner = Owner::new(owner.instance());
            state.valid_until = None;
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Whole assignments under the lock: a poisoned state is still whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
