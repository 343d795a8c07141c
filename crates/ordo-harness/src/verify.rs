//! Checks what the workers recorded against what was published.
//!
//! For every published key, the applied list (the effects committed under
//! the fence, `{seq}:{token}`, in commit order) must hold each published seq,
//! in publish order. A seq applied twice is a duplicate: allowed only for
//! the message in flight at a failover (at-least-once). A seq applied after
//! a greater one is an order violation. A token lower than one applied
//! before it means a stale owner's effect landed after its successor's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use fred::interfaces::{HashesInterface, KeysInterface, ListInterface};
use serde::Serialize;

use crate::error::{HarnessError, Result};
use crate::keys::{self, Records};

/// One applied effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// The event's seq.
    pub seq: u64,
    /// The fencing token it was committed under.
    pub token: u64,
}

/// What was recorded for one key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KeyReport {
    /// Events published (seqs `0..published`).
    pub published: u64,
    /// The applied effects, in commit order.
    pub applied: Vec<Applied>,
    /// Published seqs never applied.
    pub lost: Vec<u64>,
    /// Seqs applied again after their first application (one entry each time).
    pub duplicates: Vec<u64>,
    /// Applied effects whose seq is below one applied before them.
    pub order_violations: u64,
    /// Applied effects whose token is below one applied before them.
    pub token_regressions: u64,
    /// Applied seqs that were never published.
    pub unexpected: Vec<u64>,
    /// Per seq, how many handler runs started (retries and re-runs included).
    pub starts: BTreeMap<u64, u64>,
    /// Per seq, how many runs committed their effect.
    pub runs: BTreeMap<u64, u64>,
}

impl KeyReport {
    /// The applied seqs, in commit order.
    pub fn applied_seqs(&self) -> Vec<u64> {
        self.applied.iter().map(|a| a.seq).collect()
    }

    /// How many runs of `seq` started.
    pub fn starts_of(&self, seq: u64) -> u64 {
        self.starts.get(&seq).copied().unwrap_or(0)
    }

    /// Runs that started beyond the first of each event (retries, and
    /// re-runs after a failover), committed or not.
    pub fn reruns(&self) -> u64 {
        self.starts.values().map(|n| n.saturating_sub(1)).sum()
    }
}

/// The verdict over every published key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Events published.
    pub events: u64,
    /// Keys published to.
    pub keys: u64,
    /// Effects applied (duplicates included).
    pub applied: u64,
    /// Published events never applied.
    pub lost: u64,
    /// Applied effects out of publish order.
    pub order_violations: u64,
    /// Effects applied more than once.
    pub duplicates: u64,
    /// Handler runs beyond the first of each event (retries and re-runs
    /// after a failover, committed or not).
    pub reruns: u64,
    /// Effects of a stale token applied after a newer token's.
    pub token_regressions: u64,
    /// Applied effects of events never published.
    pub unexpected: u64,
    /// Runs that started while another run of their key was in flight
    /// under a still-valid lease.
    pub overlaps: u64,
    /// Handler invocations under a lease that was already lost (they did
    /// not start; not a breach by themselves: a stalled owner can wake up
    /// between its last check and the handler's start).
    pub stale_starts: u64,
    /// The details, per key.
    pub per_key: BTreeMap<String, KeyReport>,
}

impl Verdict {
    /// The report of `key` (empty when nothing was published to it).
    pub fn key(&self, key: &str) -> KeyReport {
        self.per_key.get(key).cloned().unwrap_or_default()
    }

    /// Whether the guarantee held: nothing lost, reordered, overlapping,
    /// applied by a stale owner, or invented.
    pub fn is_sound(&self) -> bool {
        self.lost == 0
            && self.order_violations == 0
            && self.overlaps == 0
            && self.token_regressions == 0
            && self.unexpected == 0
    }
}

impl fmt::Display for Verdict {
    /// `name: value` lines.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "events: {}", self.events)?;
        writeln!(f, "keys: {}", self.keys)?;
        writeln!(f, "applied: {}", self.applied)?;
        writeln!(f, "lost: {}", self.lost)?;
        writeln!(f, "order_violations: {}", self.order_violations)?;
        writeln!(f, "duplicates: {}", self.duplicates)?;
        writeln!(f, "reruns: {}", self.reruns)?;
        writeln!(f, "token_regressions: {}", self.token_regressions)?;
        writeln!(f, "unexpected: {}", self.unexpected)?;
        writeln!(f, "overlaps: {}", self.overlaps)?;
        write!(f, "stale_starts: {}", self.stale_starts)
    }
}

/// Reads the records of every published key and checks them (a partition
/// per key: [`verify_with`] for another routing).
pub async fn verify<C>(client: &C) -> Result<Verdict>
where
    C: HashesInterface + KeysInterface + ListInterface + Send + Sync,
{
    verify_with(client, &Records::default()).await
}

/// Reads the records of every published key, where `records` names them,
/// and checks them, key by key.
pub async fn verify_with<C>(client: &C, records: &Records) -> Result<Verdict>
where
    C: HashesInterface + KeysInterface + ListInterface + Send + Sync,
{
    let published: BTreeMap<String, u64> = client
        .hgetall(keys::PUBLISHED)
        .await
        .map_err(HarnessError::redis("read the published counts"))?;
    let mut verdict = Verdict::default();
    for (key, count) in published {
        let overlaps: Option<u64> = client
            .get(records.overlaps(&key))
            .await
            .map_err(HarnessError::redis("read an overlap counter"))?;
        let stale_starts: Option<u64> = client
            .get(records.stale_starts(&key))
            .await
            .map_err(HarnessError::redis("read a stale-start counter"))?;
        verdict.overlaps += overlaps.unwrap_or(0);
        verdict.stale_starts += stale_starts.unwrap_or(0);
        let report = key_report(client, records, &key, count).await?;
        verdict.events += report.published;
        verdict.keys += 1;
        verdict.applied += report.applied.len() as u64;
        verdict.lost += report.lost.len() as u64;
        verdict.order_violations += report.order_violations;
        verdict.duplicates += report.duplicates.len() as u64;
        verdict.reruns += report.reruns();
        verdict.token_regressions += report.token_regressions;
        verdict.unexpected += report.unexpected.len() as u64;
        verdict.per_key.insert(key, report);
    }
    Ok(verdict)
}

/// The overlap log of every published key: `{their marker} vs {my marker}`
/// per overlap, key by key (a partition per key: [`overlap_log_with`] for
/// another routing).
pub async fn overlap_log<C>(client: &C) -> Result<Vec<String>>
where
    C: HashesInterface + ListInterface + Send + Sync,
{
    overlap_log_with(client, &Records::default()).await
}

/// [`overlap_log`] of records named by `records`.
pub async fn overlap_log_with<C>(client: &C, records: &Records) -> Result<Vec<String>>
where
    C: HashesInterface + ListInterface + Send + Sync,
{
    let published: Vec<String> = client
        .hkeys(keys::PUBLISHED)
        .await
        .map_err(HarnessError::redis("read the published keys"))?;
    let mut log = Vec::new();
    for key in published {
        let entries: Vec<String> = client
            .lrange(records.overlap_log(&key), 0, -1)
            .await
            .map_err(HarnessError::redis("read an overlap log"))?;
        log.extend(entries);
    }
    Ok(log)
}

/// Reads and checks one key's records.
async fn key_report<C>(client: &C, records: &Records, key: &str, published: u64) -> Result<KeyReport>
where
    C: HashesInterface + ListInterface + Send + Sync,
{
    let applied_key = records.applied(key);
    let raw: Vec<String> = client
        .lrange(&applied_key, 0, -1)
        .await
        .map_err(HarnessError::redis(format!("read `{applied_key}`")))?;
    let applied = raw
        .iter()
        .map(|entry| parse_applied(&applied_key, entry))
        .collect::<Result<Vec<_>>>()?;
    let starts = counters(client, &records.starts(key)).await?;
    let runs = counters(client, &records.runs(key)).await?;
    Ok(check(published, applied, starts, runs))
}

/// The checks themselves, on one key's records.
fn check(
    published: u64,
    applied: Vec<Applied>,
    starts: BTreeMap<u64, u64>,
    runs: BTreeMap<u64, u64>,
) -> KeyReport {
    let mut seen = BTreeSet::new();
    let mut report = KeyReport {
        published,
        starts,
        runs,
        ..KeyReport::default()
    };
    let mut max_seq = None;
    let mut max_token = 0;
    for entry in &applied {
        if entry.seq >= published {
            report.unexpected.push(entry.seq);
        }
        if !seen.insert(entry.seq) {
            report.duplicates.push(entry.seq);
        }
        if max_seq.is_some_and(|max| entry.seq < max) {
            report.order_violations += 1;
        }
        if entry.token < max_token {
            report.token_regressions += 1;
        }
        max_seq = max_seq.max(Some(entry.seq));
        max_token = max_token.max(entry.token);
    }
    report.lost = (0..published).filter(|seq| !seen.contains(seq)).collect();
    report.applied = applied;
    report
}

fn parse_applied(key: &str, entry: &str) -> Result<Applied> {
    let parsed = entry
        .split_once(':')
        .and_then(|(seq, token)| Some((seq.parse().ok()?, token.parse().ok()?)));
    match parsed {
        Some((seq, token)) => Ok(Applied { seq, token }),
        None => Err(HarnessError::Record {
            key: key.to_owned(),
            detail: format!("entry `{entry}` is not `{{seq}}:{{token}}`"),
        }),
    }
}

/// A hash of seq → count.
async fn counters<C>(client: &C, key: &str) -> Result<BTreeMap<u64, u64>>
where
    C: HashesInterface + Send + Sync,
{
    let raw: BTreeMap<String, u64> = client
        .hgetall(key)
        .await
        .map_err(HarnessError::redis(format!("read `{key}`")))?;
    raw.into_iter()
        .map(|(seq, count)| match seq.parse() {
            Ok(seq) => Ok((seq, count)),
            Err(_) => Err(HarnessError::Record {
                key: key.to_owned(),
                detail: format!("field `{seq}` is not a seq"),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(entries: &[(u64, u64)]) -> Vec<Applied> {
        entries
            .iter()
            .map(|&(seq, token)| Applied { seq, token })
            .collect()
    }

    fn report(published: u64, entries: &[(u64, u64)]) -> KeyReport {
        check(published, applied(entries), BTreeMap::new(), BTreeMap::new())
    }

    #[test]
    fn a_clean_history_passes() {
        let r = report(3, &[(0, 1), (1, 1), (2, 5)]);
        assert!(r.lost.is_empty() && r.duplicates.is_empty() && r.unexpected.is_empty());
        assert_eq!((r.order_violations, r.token_regressions), (0, 0));
    }

    #[test]
    fn a_repeat_of_the_in_flight_event_is_a_duplicate_not_a_violation() {
        let r = report(3, &[(0, 1), (1, 1), (1, 5), (2, 5)]);
        assert_eq!(r.duplicates, [1]);
        assert_eq!(r.order_violations, 0);
    }

    #[test]
    fn going_back_is_a_violation_and_gaps_are_lost() {
        let r = report(5, &[(0, 1), (2, 1), (1, 1), (4, 1)]);
        assert_eq!(r.order_violations, 1);
        assert_eq!(r.lost, [3]);
    }

    #[test]
    fn a_stale_token_after_a_newer_one_is_a_regression() {
        let r = report(3, &[(0, 5), (1, 1), (2, 5)]);
        assert_eq!(r.token_regressions, 1);
    }

    #[test]
    fn seqs_beyond_the_published_ones_are_unexpected() {
        let r = report(1, &[(0, 1), (7, 1)]);
        assert_eq!(r.unexpected, [7]);
    }

    #[test]
    fn entries_must_be_seq_and_token() {
        assert_eq!(parse_applied("k", "3:9").unwrap(), Applied { seq: 3, token: 9 });
        assert!(parse_applied("k", "3").is_err());
        assert!(parse_applied("k", "x:9").is_err());
    }
}
