//! `ordo`: the operator's command line for Ordo's Redis runtime.
//!
//! It answers the questions operators of per-key ordered systems ask first
//! (which keys are stuck, why, and who owns what) and performs the explicit
//! actions that unstick a key without breaking its order: skip the halted
//! head, move it to the dead-letter stream, or retry it.
//!
//! Every read command has `--json`; exit codes are stable (see [`exit`]
//! and `docs/OPERATIONS.md`).

mod cli;
mod commands;
mod console;
mod context;
mod exit;
mod format;
mod settings;
mod table;
mod view;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Action, Cli, Command, DlqCommand};
use crate::context::Context;
use crate::exit::{Failure, Verdict};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Error(anyhow::Error::from(e).context("cannot start the async runtime")))
        .and_then(|runtime| runtime.block_on(run(cli)));
    match outcome {
        Ok(verdict) => verdict.code(),
        Err(failure) => {
            failure.report();
            failure.code()
        }
    }
}

async fn run(cli: Cli) -> Result<Verdict, Failure> {
    let settings = settings::CliSettings::load(&cli.global)?;
    // The console's token is checked before anything connects or listens.
    let console_token = match &cli.command {
        Command::Console(args) => console::token(args)?,
        _ => None,
    };
    let ctx = Context::connect(settings).await?;
    let result = match cli.command {
        Command::Status(args) => commands::status::run(&ctx, &args).await,
        Command::Partitions(args) => commands::partitions::run(&ctx, &args).await,
        Command::Inspect(args) => commands::inspect::run(&ctx, &args).await,
        Command::Skip(args) => commands::act::run(&ctx, Action::Skip, &args).await,
        Command::Retry(args) => commands::act::run(&ctx, Action::Retry, &args).await,
        Command::Dlq(dlq) => match (dlq.command, dlq.action.into_action()) {
            (Some(DlqCommand::List(args)), _) => commands::dlq::list(&ctx, &args).await,
            (Some(DlqCommand::Inspect(args)), _) => commands::dlq::inspect(&ctx, &args).await,
            (Some(DlqCommand::Replay(args)), _) => commands::dlq::replay(&ctx, &args).await,
            (Some(DlqCommand::Purge(args)), _) => commands::dlq::purge(&ctx, &args).await,
            (None, Some(args)) => commands::act::run(&ctx, Action::DeadLetter, &args).await,
            (None, None) => Err(Failure::Usage(
                "`ordo dlq` needs CATEGORY KEY (move a halted head to the dead-letter stream), \
                 or `list` / `inspect` / `replay` / `purge`"
                    .to_owned(),
            )),
        },
        Command::Watch(args) => commands::watch::run(&ctx, &args).await,
        Command::Repartition(args) => commands::repartition::run(&ctx, &args).await,
        Command::Setup(args) => commands::setup::run(&ctx, &args).await,
        Command::Console(args) => return console::run(ctx, &args, console_token).await,
    };
    ctx.close().await;
    result
}
