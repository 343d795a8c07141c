//! `ordo-model`: checks the lease/fence protocol model exhaustively.
//!
//! ```text
//! ordo-model check [--mutant NAME] [--config full|small|halts|aof]
//!                                              # states: N, violations: K, time
//! ordo-model mutants                           # the seeded defects, one a line
//! ordo-model hashed [--mutant NAME] [--config NAME]
//!                                              # the hashed-partition model
//! ordo-model hashed-mutants                    # its seeded defects
//! ordo-model commands [--mutant NAME] [--config NAME]
//!                                              # the command reply model
//! ordo-model commands-mutants                  # its seeded defects
//! ordo-model publish [--mutant NAME] [--config NAME]
//!                                              # the publish dedup model
//! ordo-model publish-mutants                   # its seeded defects
//! ordo-model member [--mutant NAME] [--config NAME]
//!                                              # the member lease model
//! ordo-model member-mutants                    # its seeded defects
//! ```
//! `check`, `hashed`, `commands`, `publish` and `member` exit with status 1 when a
//! property is violated.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ordo_model::{
    AOF_LOSS_BREAKS, CommandsConfig, CommandsMutant, Config, HASHED_BY_DESIGN, HashedConfig, HashedMutant,
    MemberConfig, MemberMutant, Mutant, PublishConfig, PublishMutant, check, check_commands, check_hashed,
    check_member, check_publish,
};

#[derive(Parser)]
#[command(
    name = "ordo-model",
    about = "Checks Ordo's lease/fence protocol model exhaustively"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Explores every history of the configuration and reports violations.
    Check {
        /// Seeds a known defect (see `mutants`); a counterexample is expected.
        #[arg(long)]
        mutant: Option<Mutant>,
        /// The smaller configuration of the test suite (`--config small`).
        #[arg(long, conflicts_with = "config")]
        small: bool,
        /// The configuration to explore: full (the default), small, halts
        /// (poison messages and operators) or aof (a Redis restart losing
        /// its last writes; the properties it breaks by design are expected).
        #[arg(long, value_parser = parse_config)]
        config: Option<(String, Config)>,
    },
    /// Lists the seeded defects, one a line.
    Mutants,
    /// Explores every history of a hashed partition (several keys, one
    /// lease, read-ahead, per-key runs) and reports violations.
    Hashed {
        /// Seeds a known defect (see `hashed-mutants`); a counterexample is expected.
        #[arg(long)]
        mutant: Option<HashedMutant>,
        /// The configuration to explore: full (the default: 2 keys × 2
        /// messages, a stall), stall (the same with 3 messages), crash, skip
        /// (a queue of one entry per key: the reader moves past a saturated
        /// key), park (a poison message parks its key; one instance),
        /// skip-park (both), park-crash or park-stall (park with two
        /// instances), resend (lost commit replies, resent; one instance)
        /// resend-stall (two instances), or late-held (park with one key and
        /// a held-next command that lands after the client asked again).
        #[arg(long, value_parser = parse_hashed_config)]
        config: Option<(String, HashedConfig)>,
    },
    /// Lists the hashed model's seeded defects, one a line.
    HashedMutants,
    /// Explores every history of the command reply protocol (outcome
    /// record, deduplicated publish, reply push, resends) over an abstract
    /// lease, and reports violations.
    Commands {
        /// Seeds a known defect (see `commands-mutants`); a counterexample is expected.
        #[arg(long)]
        mutant: Option<CommandsMutant>,
        /// The configuration to explore: full (the default: 2 owners, a
        /// resend, a crash, a stall, a lost push), stall, crash, or resend
        /// (2 resends, a stall and a lost push).
        #[arg(long, value_parser = parse_commands_config)]
        config: Option<(String, CommandsConfig)>,
    },
    /// Lists the command reply model's seeded defects, one a line.
    CommandsMutants,
    /// Explores every history of publish deduplication by producer id and
    /// per-stream sequence (an in-memory outbox processor's batches, failed
    /// appends, lost replies, late requests, restarts), and reports
    /// violations.
    Publish {
        /// Seeds a known defect (see `publish-mutants`); a counterexample is expected.
        #[arg(long)]
        mutant: Option<PublishMutant>,
        /// The configuration to explore: full (the default: 3 rows over 2
        /// streams, batches of 2, 3 faults, a restart), faults (4 rows on
        /// one stream, 3 faults), restart (3 rows on one stream, a fault, 2
        /// restarts) or wide (4 rows over 2 streams, batches of 3, 3
        /// faults, a restart).
        #[arg(long, value_parser = parse_publish_config)]
        config: Option<(String, PublishConfig)>,
    },
    /// Lists the publish model's seeded defects, one a line.
    PublishMutants,
    /// Explores every history of partition ownership by member lease (one
    /// liveness key per process start, leases naming their holder's
    /// member, takeover by compare and set once that member is dead), and
    /// reports violations.
    Member {
        /// Seeds a known defect (see `member-mutants`); a counterexample is expected.
        #[arg(long)]
        mutant: Option<MemberMutant>,
        /// The configuration to explore: full (the default: 2 instances, a
        /// partition of 2 messages, a crash, a stall), partitions (2
        /// partitions of a message each) or stalls (2 stalls, no crash).
        #[arg(long, value_parser = parse_member_config)]
        config: Option<(String, MemberConfig)>,
    },
    /// Lists the member lease model's seeded defects, one a line.
    MemberMutants,
}

fn parse_member_config(name: &str) -> Result<(String, MemberConfig), String> {
    MemberConfig::named(name)
        .map(|config| (name.to_owned(), config))
        .ok_or_else(|| {
            let known: Vec<&str> = MemberConfig::NAMED.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown configuration `{name}`; expected one of: {}",
                known.join(", ")
            )
        })
}

fn member(mutant: Option<MemberMutant>, config: Option<(String, MemberConfig)>) -> ExitCode {
    let (name, config) = match (config, mutant) {
        (Some(named), _) => named,
        // A mutant alone: the smallest configuration that exposes it.
        (None, Some(mutant)) => (format!("exposing {mutant}"), MemberConfig::exposing(mutant)),
        (None, None) => ("full".to_owned(), MemberConfig::FULL),
    };
    println!("configuration: {name}: {config}");
    if let Some(mutant) = mutant {
        println!("mutant: {mutant}");
    }
    let report = check_member(config, mutant);
    for violation in &report.violations {
        println!("\nviolated: {}", violation.property);
        for (step, action) in violation.trace.iter().enumerate() {
            println!("  {:>2}. {action}", step + 1);
        }
        let state = &violation.state;
        println!("  leases: {:?}", state.leases);
        println!("  member keys: {:?}", state.members);
        println!("  effects: {:?}", state.effects);
    }
    println!("states: {}", report.states);
    println!("max_depth: {}", report.max_depth);
    println!("violations: {}", report.violations.len());
    println!("time_ms: {}", report.elapsed.as_millis());
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn parse_publish_config(name: &str) -> Result<(String, PublishConfig), String> {
    PublishConfig::named(name)
        .map(|config| (name.to_owned(), config))
        .ok_or_else(|| {
            let known: Vec<&str> = PublishConfig::NAMED.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown configuration `{name}`; expected one of: {}",
                known.join(", ")
            )
        })
}

fn publish(mutant: Option<PublishMutant>, config: Option<(String, PublishConfig)>) -> ExitCode {
    let (name, config) = match (config, mutant) {
        (Some(named), _) => named,
        // A mutant alone: the smallest configuration that exposes it.
        (None, Some(mutant)) => (format!("exposing {mutant}"), PublishConfig::exposing(mutant)),
        (None, None) => ("full".to_owned(), PublishConfig::FULL),
    };
    println!("configuration: {name}: {config}");
    if let Some(mutant) = mutant {
        println!("mutant: {mutant}");
    }
    let report = check_publish(config, mutant);
    for violation in &report.violations {
        println!("\nviolated: {}", violation.property);
        for (step, action) in violation.trace.iter().enumerate() {
            println!("  {:>2}. {action}", step + 1);
        }
        let state = &violation.state;
        let rows: Vec<String> = state
            .rows
            .iter()
            .map(|r| {
                format!(
                    "start {} seq {} → stream {}{}",
                    r.incarnation,
                    r.seq,
                    r.stream,
                    if r.published { " (published)" } else { "" }
                )
            })
            .collect();
        println!("  rows: {rows:?}");
        println!(
            "  streams (row indices): {:?}, last sequences: {:?}",
            state.streams, state.last
        );
    }
    println!("states: {}", report.states);
    println!("max_depth: {}", report.max_depth);
    println!("violations: {}", report.violations.len());
    println!("time_ms: {}", report.elapsed.as_millis());
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn parse_commands_config(name: &str) -> Result<(String, CommandsConfig), String> {
    CommandsConfig::named(name)
        .map(|config| (name.to_owned(), config))
        .ok_or_else(|| {
            let known: Vec<&str> = CommandsConfig::NAMED.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown configuration `{name}`; expected one of: {}",
                known.join(", ")
            )
        })
}

fn commands(mutant: Option<CommandsMutant>, config: Option<(String, CommandsConfig)>) -> ExitCode {
    let (name, config) = match (config, mutant) {
        (Some(named), _) => named,
        // A mutant alone: the smallest configuration that exposes it.
        (None, Some(mutant)) => (format!("exposing {mutant}"), CommandsConfig::exposing(mutant)),
        (None, None) => ("full".to_owned(), CommandsConfig::FULL),
    };
    println!("configuration: {name}: {config}");
    if let Some(mutant) = mutant {
        println!("mutant: {mutant}");
    }
    let report = check_commands(config, mutant);
    for violation in &report.violations {
        println!("\nviolated: {}", violation.property);
        for (step, action) in violation.trace.iter().enumerate() {
            println!("  {:>2}. {action}", step + 1);
        }
        let state = &violation.state;
        println!(
            "  outcome record: {:?} (first recorded: {:?}), runs: {}, senders: {:?}, entries: {}",
            state.outcome,
            state.first_recorded,
            state.runs,
            state.senders.iter().map(|s| s.call).collect::<Vec<_>>(),
            state.stream.len()
        );
    }
    println!("states: {}", report.states);
    println!("max_depth: {}", report.max_depth);
    println!("violations: {}", report.violations.len());
    println!("time_ms: {}", report.elapsed.as_millis());
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn parse_hashed_config(name: &str) -> Result<(String, HashedConfig), String> {
    HashedConfig::named(name)
        .map(|config| (name.to_owned(), config))
        .ok_or_else(|| {
            let known: Vec<&str> = HashedConfig::NAMED.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown configuration `{name}`; expected one of: {}",
                known.join(", ")
            )
        })
}

fn hashed(mutant: Option<HashedMutant>, config: Option<(String, HashedConfig)>) -> ExitCode {
    let (name, config) = match (config, mutant) {
        (Some(named), _) => named,
        // A mutant alone: the smallest configuration that exposes it.
        (None, Some(mutant)) => (format!("exposing {mutant}"), HashedConfig::exposing(mutant)),
        (None, None) => ("full".to_owned(), HashedConfig::FULL),
    };
    println!("configuration: {name}: {config}");
    if let Some(mutant) = mutant {
        println!("mutant: {mutant}");
    }
    let report = check_hashed(config, mutant);
    for violation in &report.violations {
        let by_design = HASHED_BY_DESIGN.contains(&violation.property);
        println!(
            "\nviolated{}: {}",
            if by_design { " (by design)" } else { "" },
            violation.property
        );
        for (step, action) in violation.trace.iter().enumerate() {
            println!("  {:>2}. {action}", step + 1);
        }
        println!(
            "  effects: {:?}, acked: {:#b}, runs per message: {:?}",
            violation.state.effects, violation.state.acked, violation.state.runs
        );
    }
    let unexpected = report.unexpected().count();
    println!("states: {}", report.states);
    println!("max_depth: {}", report.max_depth);
    println!(
        "expected_violations: {} (what the design accepts; docs/RELIABILITY.md)",
        report.violations.len() - unexpected
    );
    println!("violations: {unexpected}");
    println!("time_ms: {}", report.elapsed.as_millis());
    if unexpected == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn parse_config(name: &str) -> Result<(String, Config), String> {
    Config::named(name)
        .map(|config| (name.to_owned(), config))
        .ok_or_else(|| {
            let known: Vec<&str> = Config::NAMED.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown configuration `{name}`; expected one of: {}",
                known.join(", ")
            )
        })
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::PublishMutants => {
            for mutant in PublishMutant::ALL {
                println!("{mutant}");
            }
            ExitCode::SUCCESS
        }
        Command::Publish { mutant, config } => publish(mutant, config),
        Command::MemberMutants => {
            for mutant in MemberMutant::ALL {
                println!("{mutant}");
            }
            ExitCode::SUCCESS
        }
        Command::Member { mutant, config } => member(mutant, config),
        Command::CommandsMutants => {
            for mutant in CommandsMutant::ALL {
                println!("{mutant}");
            }
            ExitCode::SUCCESS
        }
        Command::Commands { mutant, config } => commands(mutant, config),
        Command::HashedMutants => {
            for mutant in HashedMutant::ALL {
                println!("{mutant}");
            }
            ExitCode::SUCCESS
        }
        Command::Hashed { mutant, config } => hashed(mutant, config),
        Command::Mutants => {
            for mutant in Mutant::ALL {
                println!("{mutant}");
            }
            ExitCode::SUCCESS
        }
        Command::Check {
            mutant,
            small,
            config,
        } => {
            let (name, config) = match (small, config) {
                (true, _) => ("small".to_owned(), Config::SMALL),
                (false, Some(named)) => named,
                // A mutant alone: the smallest configuration that exposes it.
                (false, None) => match mutant {
                    Some(mutant) => (format!("exposing {mutant}"), Config::exposing(mutant)),
                    None => ("full".to_owned(), Config::FULL),
                },
            };
            println!("configuration: {name}: {config}");
            if let Some(mutant) = mutant {
                println!("mutant: {mutant}");
            }
            let report = check(config, mutant);
            for violation in &report.violations {
                println!("\nviolated: {}", violation.property);
                for (step, action) in violation.trace.iter().enumerate() {
                    println!("  {:>2}. {action}", step + 1);
                }
                println!(
                    "  effects: {:?}, acked: {:#b}",
                    violation.state.effects, violation.state.acked
                );
            }
            // A restart losing the last writes breaks some properties by
            // design of Redis's persistence; those are reported, not failed.
            let expected: &[&str] = if config.aof_losses > 0 && mutant.is_none() {
                &AOF_LOSS_BREAKS
            } else {
                &[]
            };
            let unexpected = report
                .violations
                .iter()
                .filter(|v| !expected.contains(&v.property))
                .count();
            println!("states: {}", report.states);
            println!("max_depth: {}", report.max_depth);
            if !expected.is_empty() {
                println!(
                    "expected_violations: {} (what AOF everysec can lose; docs/RELIABILITY.md)",
                    report.violations.len() - unexpected
                );
            }
            println!("violations: {unexpected}");
            println!("time_ms: {}", report.elapsed.as_millis());
            if unexpected == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
