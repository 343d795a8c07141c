//! `ordo-model`: checks the lease/fence protocol model exhaustively.
//!
//! ```text
//! ordo-model check [--mutant NAME] [--small]   # states: N, violations: K, time
//! ordo-model mutants                           # the seeded defects, one a line
//! ```
//! `check` exits with status 1 when a property is violated.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ordo_model::{Config, Mutant, check};

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
        /// The smaller configuration of the test suite.
        #[arg(long)]
        small: bool,
    },
    /// Lists the seeded defects, one a line.
    Mutants,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Mutants => {
            for mutant in Mutant::ALL {
                println!("{mutant}");
            }
            ExitCode::SUCCESS
        }
        Command::Check { mutant, small } => {
            let config = if small { Config::SMALL } else { Config::FULL };
            println!("configuration: {config}");
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
    }
}
