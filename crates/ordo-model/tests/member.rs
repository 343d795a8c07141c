//! The member lease model in the normal test suite: its configurations keep
//! every property, and every seeded mutant is caught with a counterexample
//! that breaks the property it is about.

use ordo_model::member::{LIVE_MEMBER, ONCE_IN_ORDER, ONE_RUN};
use ordo_model::{MemberConfig, MemberMutant, MemberReport, check_member, check_member_until_broken};

/// The properties `report` found broken.
fn broken(report: &MemberReport) -> Vec<&'static str> {
    report.violations.iter().map(|v| v.property).collect()
}

/// Every named configuration: a crash and a stall around one partition,
/// two partitions lost at once, two stalls, a clean stop, a rolling upgrade;
/// every property holds.
#[test]
fn every_named_member_configuration_is_clean() {
    for (name, config) in MemberConfig::NAMED {
        let report = check_member(config, None);
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

/// Each mutant, in the configuration made for it and in `full` (`stop` for
/// the one about stopping, `legacy` for the one about a rolling upgrade),
/// breaks the
/// property it is about (and, being a hole of ownership, not the fence's
/// properties: effects still land once, in order).
#[test]
fn every_member_mutant_is_caught() {
    let expected = |mutant: MemberMutant| match mutant {
        MemberMutant::RenewRecreatesMember
        | MemberMutant::TakeoverWithoutCompare
        | MemberMutant::LeaveWhileRunning
        | MemberMutant::LegacyLeaseTakenAsDead => ONE_RUN,
        MemberMutant::RunWithoutMemberCheck => LIVE_MEMBER,
    };
    for mutant in MemberMutant::ALL {
        let property = expected(mutant);
        let exposing = MemberConfig::exposing(mutant);
        // The broader configuration with the same kinds of faults.
        let broad = if exposing.stops > 0 {
            MemberConfig::STOP
        } else if exposing.legacy {
            MemberConfig::LEGACY
        } else {
            MemberConfig::FULL
        };
        for config in [exposing, broad] {
            let report = check_member_until_broken(config, Some(mutant), &[property]);
            let broken = broken(&report);
            assert!(
                broken.contains(&property),
                "{mutant} in {config}: `{property}` held, broken: {broken:?}"
            );
            assert!(
                !broken.contains(&ONCE_IN_ORDER),
                "{mutant} in {config}: the fence let an effect in twice or out of order"
            );
        }
    }
}

/// The history the renewal that recreates its key allows: the holder stalls
/// past its TTL, resumes and renews (its key back), runs under its lease,
/// while another instance, told the holder's member was dead between the
/// expiry and the renewal, takes the lease over and runs too.
#[test]
fn a_renewal_that_recreates_its_key_lets_two_members_run() {
    let mutant = MemberMutant::RenewRecreatesMember;
    let report = check_member_until_broken(MemberConfig::exposing(mutant), Some(mutant), &[ONE_RUN]);
    let violation = report
        .violations
        .iter()
        .find(|v| v.property == ONE_RUN)
        .expect("the mutant is caught");
    let trace: Vec<String> = violation.trace.iter().map(ToString::to_string).collect();
    let position = |needle: &str| {
        trace
            .iter()
            .position(|step| step.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in {trace:#?}"))
    };
    // The other instance's question lands after the expiry and before the
    // renewal brings the key back: it is told the holder is dead.
    assert!(position("expires") < position("out Alive"), "{trace:#?}");
    assert!(position("out Alive") < position("out Renew"), "{trace:#?}");
}
