//! The chaos checker end to end: the real `ordo-bench chaos` binary, with a
//! fixed seed, on its own Redis, for a minute of faults.

use std::fs::File;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use ordo_testkit::Process;

/// The seed of the CI run: its schedule of fault kinds and gaps replays.
const SEED: &str = "42";

/// Far above the run's own length (60 s of faults, a few seconds of drain),
/// so only a hang trips it.
const RUN_WITHIN: Duration = Duration::from_secs(240);

#[test]
fn a_seeded_chaos_run_keeps_the_guarantee_under_every_kind_of_fault() -> Result<()> {
    let (figures, log) = run_chaos(
        &["--duration", "60", "--seed", SEED],
        &format!("chaos-seed-{SEED}.log"),
    )?;
    let count = |name: &str| figure(&figures, name);
    assert_guarantee_kept(&figures, &log, &[])?;
    assert_eq!(figures["seed"], 42, "{figures}");
    assert_eq!(count("keys")?, 32, "{figures}");
    assert!(count("events")? > 5_000, "too little traffic: {figures}");

    let kinds = [
        "kill",
        "stop",
        "term",
        "join",
        "redis_restart",
        "redis_crash",
        "conn_delay",
    ];
    let injected: Vec<&str> = kinds
        .into_iter()
        .filter(|kind| count(&format!("faults_{kind}")).is_ok_and(|n| n > 0))
        .collect();
    assert!(count("faults_injected")? > 0, "{figures}");
    assert!(
        injected.len() >= 5,
        "only {injected:?} were injected: {figures}\n{}",
        log
    );
    assert!(
        count("faults_mid_handler")? > 0,
        "no fault landed mid-handler: {figures}"
    );
    // The kills and stops made other instances take keys over.
    assert!(count("failovers")? > 0, "no failover was measured: {figures}");
    assert!(
        figures["max_failover_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{figures}"
    );
    Ok(())
}

/// The PostgreSQL mode, short: the outbox in PostgreSQL, relays in the
/// workers and in relay-only processes, effects through the PostgreSQL
/// fence; instance and relay kills and stalls, seeded.
#[test]
fn a_seeded_postgres_chaos_run_applies_every_effect_exactly_once() -> Result<()> {
    let (figures, log) = run_chaos(
        &[
            "--postgres",
            "--duration",
            "20",
            "--seed",
            SEED,
            "--faults",
            "kill,stop,relay_kill,relay_stop,db_outage",
            "--faults-every",
            "1..2",
        ],
        &format!("chaos-pg-seed-{SEED}.log"),
    )?;
    let count = |name: &str| figure(&figures, name);
    assert_guarantee_kept(&figures, &log, &["duplicates"])?;
    assert!(
        figures["outbox"]
            .as_str()
            .is_some_and(|o| o.starts_with("postgres")),
        "{figures}"
    );
    assert!(count("events")? > 2_000, "too little traffic: {figures}");
    for kind in ["kill", "stop", "relay_kill", "relay_stop", "db_outage"] {
        assert!(
            count(&format!("faults_{kind}"))? > 0,
            "no {kind} was injected: {figures}\n{}",
            log
        );
    }
    // A database outage is transient: no key halted (the run itself fails
    // otherwise; this names it).
    assert_eq!(
        count("halts_resolved")? + count("parked_keys_resolved")?,
        0,
        "{figures}"
    );
    // Relays were killed and replaced, and the kills made other instances
    // take keys over.
    assert!(count("relays_started")? > 2, "{figures}");
    // A take-over counts whether or not another fault disturbed its timing
    // (on a loaded machine, with a fault every 1-2 s, most are disturbed).
    assert!(
        count("failovers")? + count("failovers_disturbed")? > 0,
        "no key was taken over: {figures}"
    );
    Ok(())
}

/// Commands (`--commands`), short: every instance sends commands for 8
/// shared keys while the usual faults run; no two runs of a command key
/// overlap, each sender's commands of a key are applied in send order, and
/// every command whose sender got a success was applied.
#[test]
fn a_seeded_chaos_run_with_commands_keeps_their_order_and_loses_none() -> Result<()> {
    let (figures, log) = run_chaos(
        &[
            "--commands",
            "--duration",
            "25",
            "--seed",
            SEED,
            "--keys",
            "8",
            "--rate",
            "100",
        ],
        &format!("chaos-commands-seed-{SEED}.log"),
    )?;
    let count = |name: &str| figure(&figures, name);
    assert_guarantee_kept(
        &figures,
        &log,
        &[
            "command_overlaps",
            "command_order_violations",
            "command_lost",
            "command_token_regressions",
            "command_wrong_replies",
        ],
    )?;
    assert_eq!(count("command_keys")?, 8, "{figures}");
    assert!(count("commands_ok")? > 100, "too few commands: {figures}");
    assert!(count("faults_injected")? > 0, "{figures}");
    Ok(())
}

/// Runs `ordo-bench chaos --json` with `args` on its own Redis (and
/// database); its figures, and its log (progress and worker logs, kept in a
/// file named `log_name` and shown when an assertion fails).
fn run_chaos(args: &[&str], log_name: &str) -> Result<(serde_json::Value, String)> {
    // A pipe nobody reads could fill up and block the run: the log goes to a file.
    let log_path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(log_name);
    let mut command = Command::new(env!("CARGO_BIN_EXE_ordo-bench"));
    command
        .arg("chaos")
        .args(args)
        .arg("--json")
        // Its own Redis, which it can restart and crash.
        .env_remove("REDIS_URL")
        .stderr(File::create(&log_path)?);
    let mut chaos = Process::spawn(command)?;
    let status = chaos.wait_timeout(RUN_WITHIN)?;
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let Some(status) = status else {
        chaos.kill()?;
        anyhow::bail!("the chaos run did not finish within {RUN_WITHIN:?}; its log:\n{log}");
    };
    // Its last line (the figures) may reach the reader after the exit.
    let stdout = chaos.all_lines(Duration::from_secs(30))?.join("\n");
    ensure!(
        status.success(),
        "the chaos run failed ({status}):\n{stdout}\n{log}"
    );
    let figures =
        serde_json::from_str(&stdout).with_context(|| format!("stdout is not JSON: {stdout:?}\n{log}"))?;
    Ok((figures, log))
}

/// Count `name` of a chaos run's figures.
fn figure(figures: &serde_json::Value, name: &str) -> Result<u64> {
    figures[name]
        .as_u64()
        .with_context(|| format!("no count `{name}` in {figures}"))
}

/// Every count that breaks the guarantee (and those of `also`) is 0.
fn assert_guarantee_kept(figures: &serde_json::Value, log: &str, also: &[&str]) -> Result<()> {
    let broken = [
        "overlaps",
        "order_violations",
        "lost",
        "token_regressions",
        "unexpected",
    ];
    for name in broken.iter().chain(also) {
        assert_eq!(figure(figures, name)?, 0, "{name}: {figures}\n{log}");
    }
    Ok(())
}

/// An acknowledgement window (`--ack-window 16`: each key's worker runs up
/// to 16 messages ahead of their acknowledgements): every kind of fault,
/// the guarantee, and each effect applied once, a failover running the
/// window again.
#[test]
fn a_seeded_chaos_run_with_an_acknowledgement_window_applies_every_effect_once() -> Result<()> {
    let (figures, log) = run_chaos(
        &["--duration", "30", "--seed", SEED, "--ack-window", "16"],
        &format!("chaos-window-seed-{SEED}.log"),
    )?;
    let count = |name: &str| figure(&figures, name);
    assert_guarantee_kept(&figures, &log, &["duplicates"])?;
    assert_eq!(count("ack_window")?, 16, "{figures}");
    assert!(count("faults_injected")? > 0, "{figures}");
    assert!(count("failovers")? > 0, "no failover was measured: {figures}");
    Ok(())
}

/// Hashed partitions (`--hashed 8`: the 32 keys in 8 partitions, several
/// keys per partition, read ahead and run side by side): every kind of
/// fault, and the guarantee per key.
#[test]
fn a_seeded_chaos_run_on_hashed_partitions_keeps_the_guarantee_per_key() -> Result<()> {
    let (figures, log) = run_chaos(
        &["--duration", "45", "--seed", SEED, "--hashed", "8"],
        &format!("chaos-hashed-seed-{SEED}.log"),
    )?;
    let count = |name: &str| figure(&figures, name);
    assert_guarantee_kept(&figures, &log, &[])?;
    assert_eq!(count("keys")?, 32, "{figures}");
    assert!(count("events")? > 3_000, "too little traffic: {figures}");
    assert!(count("faults_injected")? > 0, "{figures}");
    assert!(
        count("failovers")? + count("failovers_disturbed")? > 0,
        "no partition was taken over: {figures}"
    );
    Ok(())
}
