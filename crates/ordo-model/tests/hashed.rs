//! The hashed-partition model in the normal test suite: its configurations
//! keep every per-key property, and every seeded mutant is caught.

use ordo_model::{
    HASHED_BY_DESIGN, HashedConfig, HashedMutant, HashedReport, check_hashed, check_hashed_until_broken,
};

/// The properties `report` found broken.
fn broken(report: &HashedReport) -> Vec<&'static str> {
    report.violations.iter().map(|v| v.property).collect()
}

/// Fails naming every property `report` found broken besides those the
/// design accepts.
fn assert_clean(report: &HashedReport) {
    let unexpected: Vec<&str> = report.unexpected().map(|v| v.property).collect();
    assert!(
        unexpected.is_empty(),
        "{unexpected:?} broken after {} states",
        report.states
    );
}

#[test]
fn a_stalled_hashed_owner_keeps_every_per_key_property() {
    let report = check_hashed(HashedConfig::STALL, None);
    assert_clean(&report);
    assert!(report.states > 100_000, "only {} states explored", report.states);
    // Nothing is accepted by design any more: a woken owner confirms its
    // lease before it starts a message it read ahead.
    assert!(HASHED_BY_DESIGN.is_empty());
    assert!(broken(&report).is_empty(), "{:?} broken", broken(&report));
}

#[test]
fn a_crashed_hashed_owner_keeps_every_per_key_property() {
    let report = check_hashed(HashedConfig::CRASH, None);
    assert!(broken(&report).is_empty(), "{:?} broken", broken(&report));
    assert!(report.states > 100_000, "only {} states explored", report.states);
}

#[test]
fn moving_past_a_saturated_key_and_filling_its_queue_again_keeps_every_per_key_property() {
    let report = check_hashed(HashedConfig::SKIP, None);
    assert_clean(&report);
    assert!(report.states > 100_000, "only {} states explored", report.states);
}

#[test]
fn a_parked_key_holds_until_resolved_while_the_other_key_flows() {
    let report = check_hashed(HashedConfig::PARK, None);
    assert_clean(&report);
    // One instance: its stall past the TTL fences nothing it had in flight
    // (nobody takes over before it does itself, as a new member, once its
    // runs ended), so fewer states than with a lease TTL.
    assert!(report.states > 50_000, "only {} states explored", report.states);
}

#[test]
fn a_parked_key_with_entries_moved_past_holds_them_in_order() {
    let report = check_hashed(HashedConfig::SKIP_PARK, None);
    assert_clean(&report);
    assert!(report.states > 50_000, "only {} states explored", report.states);
}

#[test]
fn a_resent_commit_lands_once_while_the_other_key_commits() {
    let report = check_hashed(HashedConfig::RESEND, None);
    assert_clean(&report);
    assert!(report.states > 20_000, "only {} states explored", report.states);
}

/// A held-next command delayed on its connection past the client's
/// timeout lands after the client asked again and went on (issue 26.8): it
/// is refused as a command of a closed attempt, so it can neither end the
/// holding of a key whose next message is being held nor answer twice.
#[test]
fn a_late_held_next_command_changes_nothing() {
    let report = check_hashed(HashedConfig::LATE_HELD, None);
    assert_clean(&report);
    assert!(broken(&report).is_empty(), "{:?} broken", broken(&report));
    assert!(report.states > 10_000, "only {} states explored", report.states);
}

#[test]
fn every_hashed_mutant_breaks_the_per_key_property_it_is_about() {
    let expect = [
        (
            HashedMutant::KeyNextBeforeAck,
            "each key's effects land in publish order",
        ),
        (
            HashedMutant::KeyNextBeforeAck,
            "a failover re-runs at most one message per key",
        ),
        (
            HashedMutant::TakeoverSkipsPending,
            "once faults stop, every published message is handled",
        ),
        (
            HashedMutant::TakeoverSkipsPending,
            "no key's effect lands before its earlier messages' effects",
        ),
        (
            HashedMutant::QueueAheadOfMovedPast,
            "each key's effects land in publish order",
        ),
        (
            HashedMutant::ResolvedKeySkipsHeld,
            "no key's effect lands before its earlier messages' effects",
        ),
        (
            HashedMutant::ResolvedKeySkipsHeld,
            "once faults stop, every published message is handled",
        ),
        (
            HashedMutant::SharedCommitMarker,
            "under one lease a message's effect lands at most once",
        ),
        (
            HashedMutant::LeaseWithoutNonce,
            "at most one run of a key at once by owners whose effects can land",
        ),
        (
            HashedMutant::StartWithoutConfirming,
            "a stale owner starts no run",
        ),
        (
            HashedMutant::UnguardedHeldNext,
            "a key holding messages aside is listed as holding",
        ),
        (
            HashedMutant::CommitWithoutAppliedCheck,
            "each message's effect lands once",
        ),
        (
            HashedMutant::UnguardedHeldNext,
            "once faults stop, every published message is handled",
        ),
    ];
    for mutant in HashedMutant::ALL {
        // The exploration stops once the properties this mutant is about are
        // broken (any, for a mutant without one listed): shortest
        // counterexamples all the same, without the rest of the space.
        let wanted: Vec<&'static str> = expect
            .iter()
            .filter(|(m, _)| *m == mutant)
            .map(|(_, property)| *property)
            .collect();
        let report = check_hashed_until_broken(HashedConfig::exposing(mutant), Some(mutant), &wanted);
        let broken = broken(&report);
        let violation = report
            .unexpected()
            .next()
            .unwrap_or_else(|| panic!("mutant {mutant} was not caught ({} states)", report.states));
        assert!(!violation.trace.is_empty(), "{mutant}: an empty trace");
        for (_, property) in expect.iter().filter(|(m, _)| *m == mutant) {
            assert!(
                broken.contains(property),
                "{mutant}: broke {broken:?}, not {property:?}"
            );
        }
    }
}

#[test]
fn hashed_mutant_and_configuration_names_round_trip() {
    for mutant in HashedMutant::ALL {
        assert_eq!(mutant.name().parse::<HashedMutant>(), Ok(mutant));
    }
    let error = "no-such".parse::<HashedMutant>().unwrap_err().to_string();
    assert!(
        error.contains("no-such") && error.contains("takeover-skips-pending"),
        "{error}"
    );
    for (name, config) in HashedConfig::NAMED {
        assert_eq!(HashedConfig::named(name), Some(config));
    }
    assert_eq!(HashedConfig::named("nope"), None);
}
