//! The protocol model in the normal test suite: a smaller configuration is
//! clean, and every seeded mutant is caught with a counterexample.

use ordo_model::{AOF_LOSS_BREAKS, Config, Mutant, Report, check, check_until_broken};

/// Fails naming every property `report` found broken.
fn assert_clean(report: &Report) {
    let broken: Vec<&str> = report.violations.iter().map(|v| v.property).collect();
    assert!(
        broken.is_empty(),
        "{broken:?} broken after {} states",
        report.states
    );
}

#[test]
fn the_protocol_keeps_every_property_in_the_small_configuration() {
    let report = check(Config::SMALL, None);
    assert_clean(&report);
    assert!(report.states > 100_000, "only {} states explored", report.states);
}

#[test]
fn every_mutant_yields_a_counterexample() {
    for mutant in Mutant::ALL {
        let config = Config::exposing(mutant);
        // A configuration with a Redis restart losing writes breaks some
        // properties without any mutant: the mutant must break another.
        let by_design: &[&str] = if config.aof_losses > 0 {
            &AOF_LOSS_BREAKS
        } else {
            &[]
        };
        let report = if by_design.is_empty() {
            // Stops at the first broken property: a shortest counterexample.
            check_until_broken(config, Some(mutant), &[])
        } else {
            check(config, Some(mutant))
        };
        let violation = report
            .violations
            .iter()
            .find(|v| !by_design.contains(&v.property))
            .unwrap_or_else(|| panic!("mutant {mutant} was not caught ({} states)", report.states));
        assert!(!violation.trace.is_empty(), "{mutant}: an empty trace");
    }
}

#[test]
fn each_mutant_breaks_the_property_it_is_about() {
    let expect = [
        (Mutant::CommitFromOlderAttempt, "effects land in publish order"),
        (Mutant::ReclaimWithoutLease, "a run starts only under the lease"),
        (
            Mutant::ReapNotAtomicWithPublish,
            "no published message is stranded",
        ),
        (Mutant::ReleaseWhileRunning, "at most one live run holds the key"),
        (Mutant::LeaseWithoutNonce, "at most one live run holds the key"),
        (
            Mutant::HaltWithoutClosingAttempts,
            "no stale halt undoes an operator's decision",
        ),
        (
            Mutant::ResolveWithoutExpectedHead,
            "an operator's skip lands on the head it saw",
        ),
        (
            Mutant::CountTransientFailures,
            "Redis counts only ordinary failures, each once",
        ),
        (
            Mutant::CountEveryClose,
            "Redis counts only ordinary failures, each once",
        ),
        (
            Mutant::CommitWithoutAppliedCheck,
            "each message's effect lands once",
        ),
        (Mutant::OneAppliedRecord, "each message's effect lands once"),
        (Mutant::OneAppliedRecord, "effects land in publish order"),
    ];
    for (mutant, property) in expect {
        let report = check_until_broken(Config::exposing(mutant), Some(mutant), &[property]);
        let broken: Vec<&str> = report.violations.iter().map(|v| v.property).collect();
        assert!(
            broken.contains(&property),
            "{mutant}: broke {broken:?}, not {property:?}"
        );
    }
}

#[test]
fn the_attempt_accounting_keeps_every_property() {
    // An ordinary error (counted) and a client timeout (transient), with a
    // stall and a lost reply: each ordinary failure is counted once, a
    // transient one never.
    let report = check(Config::ATTEMPTS, None);
    assert_clean(&report);
}

#[test]
fn mutant_names_round_trip_and_unknown_names_list_the_known_ones() {
    for mutant in Mutant::ALL {
        assert_eq!(mutant.name().parse::<Mutant>(), Ok(mutant));
    }
    let error = "no-such".parse::<Mutant>().unwrap_err().to_string();
    assert!(error.contains("commit-from-older-attempt"), "{error}");
}

#[test]
fn a_crash_and_restart_keep_every_property() {
    let config = Config {
        crashes: 1,
        stalls: 0,
        timeouts: 0,
        kills: 0,
        ..Config::FULL
    };
    let report = check(config, None);
    assert_clean(&report);
}

#[test]
fn halts_hold_until_an_operator_resolves_them_and_decisions_land_on_the_head_seen() {
    let report = check(Config::HALTS, None);
    assert_clean(&report);
    assert!(report.states > 100_000, "only {} states explored", report.states);
}

#[test]
fn a_redis_restart_losing_its_last_writes_breaks_exactly_what_the_docs_say() {
    let report = check(Config::AOF, None);
    let mut broken: Vec<&str> = report.violations.iter().map(|v| v.property).collect();
    broken.sort_unstable();
    let mut expected = AOF_LOSS_BREAKS.to_vec();
    expected.sort_unstable();
    assert_eq!(
        broken, expected,
        "a Redis restart losing its last writes should break exactly the documented properties"
    );
}

/// The liveness property has teeth: a message stranded by a reap that ran
/// between a publish's two halves is never handled.
#[test]
fn a_stranded_message_is_never_handled() {
    let mutant = Mutant::ReapNotAtomicWithPublish;
    let property = "once faults stop, every published message is handled";
    let report = check_until_broken(Config::exposing(mutant), Some(mutant), &[property]);
    let broken: Vec<&str> = report.violations.iter().map(|v| v.property).collect();
    assert!(broken.contains(&property), "{broken:?}");
}

#[test]
fn every_named_configuration_is_found_by_name() {
    for (name, config) in Config::NAMED {
        assert_eq!(Config::named(name), Some(config));
    }
    assert_eq!(Config::named("nope"), None);
}

/// An acknowledgement window: a worker runs the rest of its read batch
/// with up to two acknowledgements unanswered, reads again once every one
/// is answered; a stall past the TTL makes the next owner run the window
/// again, whose commits apply nothing twice (`ordo-model check --config
/// window` adds a lost reply: 12.8 million states, too many for the suite).
#[test]
fn an_acknowledgement_window_keeps_every_property() {
    let config = Config {
        timeouts: 0,
        ..Config::WINDOW
    };
    let report = check(config, None);
    assert_clean(&report);
    assert!(report.states > 100_000, "only {} states explored", report.states);
}
