//! The command reply model in the normal test suite: its configurations
//! keep every property, and every seeded mutant is caught with a
//! counterexample that breaks the property it is about.

use ordo_model::commands::{
    DEDUP, EVERY_SENDER_ANSWERED, ONE_OUTCOME, RECORDED_NEVER_RERUN, RERUN_ONLY_AFTER_LOSS,
};
use ordo_model::{
    CommandsConfig, CommandsMutant, CommandsReport, check_commands, check_commands_until_broken,
};

/// The properties `report` found broken.
fn broken(report: &CommandsReport) -> Vec<&'static str> {
    report.violations.iter().map(|v| v.property).collect()
}

/// Fails naming every property `report` found broken.
fn assert_clean(report: &CommandsReport) {
    let broken = broken(report);
    assert!(
        broken.is_empty(),
        "{broken:?} broken after {} states",
        report.states
    );
}

/// Every fault at once (2 owners, a resend from either instance, a crash at
/// any step, a stall past the lease, a lost push): one outcome, no run
/// after it is recorded, no second entry, every waiting sender answered.
#[test]
fn resends_crashes_stalls_and_lost_pushes_keep_every_command_property() {
    let report = check_commands(CommandsConfig::FULL, None);
    assert_clean(&report);
    assert!(report.states > 20_000, "only {} states explored", report.states);
}

#[test]
fn two_resends_around_a_stalled_owner_keep_every_command_property() {
    let report = check_commands(CommandsConfig::RESEND, None);
    assert_clean(&report);
    assert!(report.states > 5_000, "only {} states explored", report.states);
}

/// Every named configuration but `wide` (8 million states: `ordo-model
/// commands --config wide`).
#[test]
fn every_named_commands_configuration_is_clean() {
    let small = CommandsConfig::NAMED
        .into_iter()
        .filter(|(_, config)| *config != CommandsConfig::WIDE);
    for (name, config) in small {
        let report = check_commands(config, None);
        assert!(
            report.violations.is_empty(),
            "{name}: {:?} broken after {} states",
            broken(&report),
            report.states
        );
    }
}

/// A stale owner's run is the one case where a command runs twice: the
/// model reaches it (the bound on runs is not vacuous), and the second run
/// still returns the first outcome to every sender.
#[test]
fn a_stalled_owner_mid_run_is_the_only_way_to_a_second_run() {
    use stateright::Model;

    let model = ordo_model::Commands {
        config: CommandsConfig::STALL,
        mutant: None,
    };
    assert_clean(&check_commands(model.config, None));
    // Walk the model's reachable states, looking for a second run.
    let mut reached = false;
    let mut frontier = model.init_states();
    let mut seen = std::collections::HashSet::new();
    while let Some(state) = frontier.pop() {
        if !seen.insert(state.clone()) {
            continue;
        }
        if state.runs == 2 {
            assert!(state.lost_mid_run >= 1, "{state:?}");
            reached = true;
            break;
        }
        let mut actions = Vec::new();
        model.actions(&state, &mut actions);
        frontier.extend(actions.into_iter().filter_map(|a| model.next_state(&state, a)));
    }
    assert!(reached, "no history of a stalled owner runs the command twice");
}

#[test]
fn every_commands_mutant_breaks_the_property_it_is_about() {
    let expect = [
        (CommandsMutant::OutcomeOverwrite, ONE_OUTCOME),
        (CommandsMutant::RerunReclaimed, RECORDED_NEVER_RERUN),
        (CommandsMutant::RerunReclaimed, RERUN_ONLY_AFTER_LOSS),
        (CommandsMutant::PushOwnOutcome, ONE_OUTCOME),
        (CommandsMutant::ResendWithoutDedup, DEDUP),
        (CommandsMutant::ResendWithoutDedup, RECORDED_NEVER_RERUN),
        (CommandsMutant::WaitWithoutPolling, EVERY_SENDER_ANSWERED),
    ];
    for mutant in CommandsMutant::ALL {
        let wanted: Vec<&'static str> = expect
            .iter()
            .filter(|(m, _)| *m == mutant)
            .map(|(_, property)| *property)
            .collect();
        assert!(!wanted.is_empty(), "{mutant}: no property listed");
        let report = check_commands_until_broken(CommandsConfig::exposing(mutant), Some(mutant), &wanted);
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

/// Each mutant is caught in the test suite's configuration too, not only in
/// the one made for it.
#[test]
fn every_commands_mutant_is_caught_with_every_fault_at_once() {
    for mutant in CommandsMutant::ALL {
        let report = check_commands_until_broken(CommandsConfig::FULL, Some(mutant), &[]);
        assert!(
            !report.violations.is_empty(),
            "mutant {mutant} was not caught ({} states)",
            report.states
        );
    }
}

#[test]
fn commands_mutant_and_configuration_names_round_trip() {
    for mutant in CommandsMutant::ALL {
        assert_eq!(mutant.name().parse::<CommandsMutant>(), Ok(mutant));
    }
    let error = "no-such".parse::<CommandsMutant>().unwrap_err().to_string();
    assert!(
        error.contains("no-such") && error.contains("outcome-overwrite"),
        "{error}"
    );
    for (name, config) in CommandsConfig::NAMED {
        assert_eq!(CommandsConfig::named(name), Some(config));
    }
    assert_eq!(CommandsConfig::named("nope"), None);
}
