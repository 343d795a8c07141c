//! Why an effect was applied more than once.
//!
//! Delivery is at-least-once, so duplicates are allowed; what matters is
//! which mechanism produced each, told apart by the tokens the effects were
//! committed under and the `start` lines of the event's runs:
//!
//! - **failover**: applied again under a newer token: the next owner re-ran
//!   the message in flight (the contract's at-least-once);
//! - **recommitted**: one run, two effects under its token: the run retried
//!   a commit whose first attempt had been applied but whose reply was lost
//!   (a Redis restart dropped the connection);
//! - **retried**: the same owner ran the event again after a failed attempt
//!   (`attempt` above 1) that had applied its effect;
//! - **redelivered**: the same owner, under the same token, received the
//!   event twice and ran it twice as a first attempt: the event is twice in
//!   its stream (published twice), or it was redelivered under an unchanged
//!   lease.

use std::collections::BTreeMap;

use ordo_harness::verify::Verdict;

use super::fleet::RunStart;

/// Extra applications by cause; they add up to the verdict's `duplicates`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Causes {
    pub(crate) failover: u64,
    pub(crate) recommitted: u64,
    pub(crate) retried: u64,
    pub(crate) redelivered: u64,
}

impl Causes {
    /// Duplicates under the token of an earlier application.
    pub(crate) fn same_token(&self) -> u64 {
        self.recommitted + self.retried + self.redelivered
    }
}

/// One event applied more than once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Duplicate {
    pub(crate) key: String,
    pub(crate) seq: u64,
    /// The tokens of its applications, in commit order.
    pub(crate) tokens: Vec<u64>,
    /// The cause of each application after the first.
    pub(crate) causes: Vec<&'static str>,
}

/// Classifies every duplicate of `verdict`; `runs` gives the runs of an
/// event that started (from the instances' lines).
pub(crate) fn classify<'a>(
    verdict: &Verdict,
    runs: impl Fn(&str, u64) -> &'a [RunStart],
) -> (Causes, Vec<Duplicate>) {
    let mut causes = Causes::default();
    let mut found = Vec::new();
    for (key, report) in &verdict.per_key {
        let mut tokens: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for applied in &report.applied {
            tokens.entry(applied.seq).or_default().push(applied.token);
        }
        for (seq, tokens) in tokens.into_iter().filter(|(_, t)| t.len() > 1) {
            let runs = runs(key, seq);
            let mut named = Vec::new();
            for (i, token) in tokens.iter().enumerate().skip(1) {
                let cause = if !tokens[..i].contains(token) {
                    causes.failover += 1;
                    "failover"
                } else {
                    let under: Vec<&RunStart> = runs.iter().filter(|r| r.token == *token).collect();
                    if under.len() <= 1 {
                        causes.recommitted += 1;
                        "recommitted"
                    } else if under.iter().any(|r| r.attempt > 1) {
                        causes.retried += 1;
                        "retried"
                    } else {
                        causes.redelivered += 1;
                        "redelivered"
                    }
                };
                named.push(cause);
            }
            found.push(Duplicate {
                key: key.clone(),
                seq,
                tokens,
                causes: named,
            });
        }
    }
    (causes, found)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use ordo_harness::verify::{Applied, KeyReport};

    use super::*;

    fn run(token: u64, attempt: u32) -> RunStart {
        RunStart {
            at: Instant::now(),
            instance: "w1".to_owned(),
            token,
            attempt,
        }
    }

    #[test]
    fn each_extra_application_gets_its_cause() {
        // seq 1: a new owner re-ran it; seq 2: one run applied twice;
        // seq 3: delivered twice; seq 4: retried after a failed attempt.
        let applied = [
            (0, 5),
            (1, 5),
            (1, 9),
            (2, 9),
            (2, 9),
            (3, 9),
            (3, 9),
            (4, 9),
            (4, 9),
        ]
        .map(|(seq, token)| Applied { seq, token })
        .to_vec();
        let mut verdict = Verdict::default();
        verdict.per_key.insert(
            "k".to_owned(),
            KeyReport {
                applied,
                ..KeyReport::default()
            },
        );
        let history: BTreeMap<u64, Vec<RunStart>> = BTreeMap::from([
            (1, vec![run(5, 1), run(9, 1)]),
            (2, vec![run(9, 1)]),
            (3, vec![run(9, 1), run(9, 1)]),
            (4, vec![run(9, 1), run(9, 2)]),
        ]);
        let (causes, found) = classify(&verdict, |_, seq| history.get(&seq).map_or(&[], Vec::as_slice));
        assert_eq!(
            causes,
            Causes {
                failover: 1,
                recommitted: 1,
                retried: 1,
                redelivered: 1
            }
        );
        assert_eq!(causes.same_token(), 3);
        let named: Vec<(u64, Vec<&str>)> = found.into_iter().map(|d| (d.seq, d.causes)).collect();
        assert_eq!(
            named,
            [
                (1, vec!["failover"]),
                (2, vec!["recommitted"]),
                (3, vec!["redelivered"]),
                (4, vec!["retried"])
            ]
        );
    }
}
