//! `ordo-pg-relay`'s command line, without a server: `--help` prints usage,
//! and a missing setting or a bad one is named with where to give it.

use std::process::Command;

fn relay(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ordo-pg-relay"));
    command
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URL")
        .env_remove("ORDO_CONFIG")
        .env_remove("RUST_BACKTRACE");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("ordo-pg-relay runs")
}

#[test]
fn help_prints_the_usage_and_every_setting_without_a_database() {
    let output = relay(&["--help"], &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "Usage: ordo-pg-relay",
        "--database-url",
        "DATABASE_URL",
        "--redis-url",
        "ORDO_REDIS_URL",
        "--config",
        "ORDO_OUTBOX_SCHEMA",
        "ORDO_RELAY_LEASE_TTL_MS",
        "ORDO_RELAY_POLL_MS",
        "ORDO_RELAY_RETENTION_S",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
    }
}

#[test]
fn a_missing_database_says_how_to_give_one_and_a_bad_setting_names_its_variable() {
    let output = relay(&[], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("--database-url") && stderr.contains("DATABASE_URL") && stderr.contains("--help"),
        "{stderr}"
    );
    let output = relay(
        &["--database-url", "postgres://127.0.0.1:1/db"],
        &[
            ("ORDO_RELAY_LEASE_TTL_MS", "soon"),
            ("REDIS_URL", "redis://127.0.0.1:1"),
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("relay.lease_ttl_ms") && stderr.contains("ORDO_RELAY_LEASE_TTL_MS"),
        "{stderr}"
    );
}
