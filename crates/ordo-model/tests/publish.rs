//! The publish deduplication model in the normal test suite: its
//! configurations keep every property, and every seeded mutant is caught
//! with a counterexample that breaks the property it is about.

use std::collections::HashSet;

use ordo_model::publish::{EVERY_ROW_PUBLISHED, NO_DROP, NO_DUPLICATE, PublishState};
use ordo_model::{
    Publish, PublishConfig, PublishMutant, PublishReport, check_publish, check_publish_until_broken,
};
use stateright::Model;

/// The properties `report` found broken.
fn broken(report: &PublishReport) -> Vec<&'static str> {
    report.violations.iter().map(|v| v.property).collect()
}

/// Fails naming every property `report` found broken.
fn assert_clean(report: &PublishReport) {
    let broken = broken(report);
    assert!(
        broken.is_empty(),
        "{broken:?} broken after {} states",
        report.states
    );
}

/// Whether some state reachable in `config` (no mutant) satisfies `wanted`.
fn reaches(config: PublishConfig, wanted: impl Fn(&PublishState) -> bool) -> bool {
    let model = Publish { config, mutant: None };
    let mut frontier = model.init_states();
    let mut seen = HashSet::new();
    while let Some(state) = frontier.pop() {
        if wanted(&state) {
            return true;
        }
        if !seen.insert(state.clone()) {
            continue;
        }
        let mut actions = Vec::new();
        model.actions(&state, &mut actions);
        frontier.extend(actions.into_iter().filter_map(|a| model.next_state(&state, a)));
    }
    false
}

/// 3 rows over 2 streams in batches of 2, with failed appends, lost
/// replies, late requests and a restart: every row once, in order, none
/// marked published without its entry, the running producer's all
/// published.
#[test]
fn failures_late_requests_and_a_restart_keep_every_publish_property() {
    let report = check_publish(PublishConfig::FULL, None);
    assert_clean(&report);
    assert!(report.states > 100_000, "only {} states explored", report.states);
}

/// Every named configuration but `wide` (`ordo-model publish --config
/// wide`).
#[test]
fn every_named_publish_configuration_is_clean() {
    let small = PublishConfig::NAMED
        .into_iter()
        .filter(|(_, config)| *config != PublishConfig::WIDE);
    for (name, config) in small {
        let report = check_publish(config, None);
        assert!(
            report.violations.is_empty(),
            "{name}: {:?} broken after {} states",
            broken(&report),
            report.states
        );
        assert!(
            report.states > 1_000,
            "{name}: only {} states explored",
            report.states
        );
    }
}

/// The histories the dedup is there for are reached (the properties are
/// not kept vacuously): a request that lands after its resend was carried
/// out with every row already in the stream, a call going ahead of another
/// stream's pending row, and a restarted producer's rows in a stream beside
/// its previous start's, under the same sequences.
#[test]
fn a_late_request_and_a_restart_with_reused_sequences_are_reached() {
    let config = PublishConfig::FULL;
    // Every row of the first start in its stream and published, while a
    // request carrying them is still to land.
    assert!(
        reaches(config, |state| {
            !state.late.is_empty()
                && state.late.iter().all(|call| {
                    call.rows.iter().all(|&row| {
                        let row = usize::from(row);
                        state.rows[row].published
                            && state.streams[usize::from(state.rows[row].stream)].contains(&(row as u8))
                    })
                })
        }),
        "no request lands after its rows were published"
    );
    // A call taking a row of one stream while an earlier row of another
    // stream waits (the rule binds each stream on its own).
    assert!(
        reaches(config, |state| {
            state.calls.first().is_some_and(|call| {
                let first = usize::from(call.rows[0]);
                state.rows[..first]
                    .iter()
                    .any(|row| row.incarnation == state.incarnation && !row.published)
            })
        }),
        "no call goes ahead of another stream's pending row"
    );
    // Sequence 1 of both starts in one stream.
    assert!(
        reaches(config, |state| {
            state.streams.iter().any(|entries| {
                let ones: HashSet<u8> = entries
                    .iter()
                    .map(|&row| state.rows[usize::from(row)])
                    .filter(|row| row.seq == 1)
                    .map(|row| row.incarnation)
                    .collect();
                ones.len() == 2
            })
        }),
        "no stream holds sequence 1 of two process starts"
    );
}

#[test]
fn every_publish_mutant_breaks_the_property_it_is_about() {
    let expect = [
        (PublishMutant::DedupAcceptsEqual, NO_DUPLICATE),
        (PublishMutant::RecordBeforeAppend, NO_DROP),
        (PublishMutant::RecordBeforeAppend, EVERY_ROW_PUBLISHED),
        (PublishMutant::RestartKeepsId, NO_DROP),
        (PublishMutant::RestartKeepsId, EVERY_ROW_PUBLISHED),
        (PublishMutant::SkipAhead, NO_DROP),
        (PublishMutant::SkipAhead, EVERY_ROW_PUBLISHED),
        (PublishMutant::NoGapCheck, NO_DROP),
        (PublishMutant::NoGapCheck, EVERY_ROW_PUBLISHED),
    ];
    for mutant in PublishMutant::ALL {
        let wanted: Vec<&'static str> = expect
            .iter()
            .filter(|(m, _)| *m == mutant)
            .map(|(_, property)| *property)
            .collect();
        assert!(!wanted.is_empty(), "{mutant}: no property listed");
        let report = check_publish_until_broken(PublishConfig::exposing(mutant), Some(mutant), &wanted);
        let broken = broken(&report);
        for property in &wanted {
            let violation = report
                .violations
                .iter()
                .find(|v| v.property == *property)
                .unwrap_or_else(|| panic!("{mutant}: broke {broken:?}, not {property:?}"));
            assert!(!violation.trace.is_empty(), "{mutant}: an empty trace");
        }
    }
}

/// Two calls out at once (a batch's chunks pipelined), with failed
/// appends, lost replies, late requests and a restart: a call whose
/// earlier row of a stream is not in it stops at the gap, and every
/// property holds.
#[test]
fn pipelined_calls_keep_every_publish_property() {
    let report = check_publish(PublishConfig::PIPELINED, None);
    assert_clean(&report);
    assert!(report.states > 100_000, "only {} states explored", report.states);
    // The gap is reached: a call stops at a row whose earlier row of its
    // stream is not in the stream.
    assert!(
        reaches(PublishConfig::PIPELINED, |state| {
            state
                .calls
                .iter()
                .any(|call| matches!(call.reply, Some(ordo_model::publish::Reply::Gap(_))))
        }),
        "no call stops at a gap"
    );
}

/// Each mutant is caught in the test suite's configuration too, not only in
/// the one made for it (the pipelined one for the gap check, which only
/// calls out at once need).
#[test]
fn every_publish_mutant_is_caught_with_every_fault_at_once() {
    for mutant in PublishMutant::ALL {
        let config = match mutant {
            PublishMutant::NoGapCheck => PublishConfig::PIPELINED,
            _ => PublishConfig::FULL,
        };
        let report = check_publish_until_broken(config, Some(mutant), &[]);
        assert!(
            !report.violations.is_empty(),
            "mutant {mutant} was not caught ({} states)",
            report.states
        );
    }
}

#[test]
fn publish_mutant_and_configuration_names_round_trip() {
    for mutant in PublishMutant::ALL {
        assert_eq!(mutant.name().parse::<PublishMutant>(), Ok(mutant));
    }
    let names: Vec<&str> = PublishMutant::ALL.iter().map(|m| m.name()).collect();
    assert_eq!(
        names,
        [
            "dedup-accepts-equal",
            "record-before-append",
            "restart-keeps-id",
            "skip-ahead",
            "no-gap-check"
        ]
    );
    let error = "no-such".parse::<PublishMutant>().unwrap_err().to_string();
    assert!(
        error.contains("no-such") && error.contains("skip-ahead"),
        "{error}"
    );
    for (name, config) in PublishConfig::NAMED {
        assert_eq!(PublishConfig::named(name), Some(config));
    }
    assert_eq!(PublishConfig::named("nope"), None);
}
