//! `throughput`, `latency`, `idle`, `failover` and `scale` with tiny parameters
//! against a real Redis: each one runs to the end, prints JSON, and its
//! counts add up. No timing is asserted: these are programs that measure,
//! and a test machine's timings mean nothing.
//!
//! Each test has a `redis-server` of its own (never `REDIS_URL`): the
//! benchmarks clear their keys, so two of them must not share a database.

use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use ordo_testkit::Redis;
use serde_json::Value;

/// Runs `ordo-bench <args> --json` against `redis` and parses its figures.
fn bench(redis: &Redis, args: &[&str]) -> Result<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_ordo-bench"))
        .args(args)
        .args(["--json", "--redis-url"])
        .arg(redis.url())
        .output()?;
    let stdout = String::from_utf8(output.stdout)?;
    ensure!(
        output.status.success(),
        "ordo-bench {args:?} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).with_context(|| format!("stdout is not JSON: {stdout:?}"))
}

fn number(figures: &Value, name: &str) -> f64 {
    figures[name]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {name} in {figures}"))
}

#[test]
fn throughput_drains_every_backlog_and_compares_with_the_baseline() -> Result<()> {
    let redis = Redis::start_local()?;
    let figures = bench(
        &redis,
        &[
            "throughput",
            "--events",
            "600",
            "--keys",
            "4",
            "--batch",
            "8",
            "--per-commit",
            "50",
            "--instances",
            "1,2",
        ],
    )?;
    assert_eq!(figures["events"], 600, "{figures}");
    assert_eq!(figures["keys"], 4, "{figures}");
    assert_eq!(figures["batch"], 8, "{figures}");
    for rate in [
        "publish_msgs_per_s",
        "ordered_msgs_per_s_1",
        "ordered_msgs_per_s_2",
        "baseline_msgs_per_s",
    ] {
        assert!(number(&figures, rate) > 0.0, "{rate}: {figures}");
    }
    assert_eq!(figures["ordered_max_share_1"], 1.0, "{figures}");
    // Every message costs an acknowledgement script, at most one call each
    // (fewer when the group commit takes several in one call), and some CPU.
    for instances in [1, 2] {
        let calls = number(&figures, &format!("ordered_script_calls_per_msg_{instances}"));
        assert!(calls > 0.0 && calls <= 1.5, "{figures}");
        for cost in ["script_us", "redis_cpu_us", "engine_cpu_us"] {
            let name = format!("ordered_{cost}_per_msg_{instances}");
            assert!(number(&figures, &name) > 0.0, "{name}: {figures}");
        }
    }
    assert!(number(&figures, "redis_bytes_per_pending_msg") > 0.0, "{figures}");
    let share = number(&figures, "ordered_max_share_2");
    assert!((0.5..=1.0).contains(&share), "{figures}");
    let ratio = number(&figures, "ordered_msgs_per_s_1") / number(&figures, "baseline_msgs_per_s");
    // Both rates are rounded to whole messages per second before printing.
    assert!(
        (number(&figures, "ratio_ordered_to_baseline") - ratio).abs() < 0.01,
        "{figures}"
    );
    Ok(())
}

#[test]
fn latency_has_one_sample_per_offered_event() -> Result<()> {
    let redis = Redis::start_local()?;
    let figures = bench(
        &redis,
        &["latency", "--rate", "200", "--keys", "4", "--duration-s", "0.5"],
    )?;
    // Due at 0, 5, ..., 500 ms.
    assert_eq!(figures["latency_events"], 101, "{figures}");
    assert_eq!(figures["latency_samples"], 101, "{figures}");
    let (p50, p99, max) = (
        number(&figures, "latency_p50_ms"),
        number(&figures, "latency_p99_ms"),
        number(&figures, "latency_max_ms"),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{figures}");
    Ok(())
}

#[test]
fn idle_owns_every_partition_and_counts_its_commands() -> Result<()> {
    let redis = Redis::start_local()?;
    let figures = bench(
        &redis,
        &[
            "idle",
            "--partitions",
            "20",
            "--window-s",
            "1",
            "--settle-s",
            "0.2",
        ],
    )?;
    assert_eq!(figures["owned_partitions"], 20, "{figures}");
    let commands = number(&figures, "idle_client_commands");
    let seconds = number(&figures, "idle_window_ms") / 1_000.0;
    assert!(seconds >= 1.0, "{figures}");
    // At least the waker's blocking reads ran in the window.
    assert!(commands > 0.0, "{figures}");
    assert!(
        (number(&figures, "idle_redis_cmds_per_s") - commands / seconds).abs() <= 0.5,
        "{figures}"
    );
    let breakdown: f64 = figures["idle_commands"]
        .as_str()
        .context("idle_commands is text")?
        .split(',')
        .map(|entry| {
            entry
                .split_once('=')
                .map_or(0.0, |(_, n)| n.parse().unwrap_or(f64::NAN))
        })
        .sum();
    assert_eq!(breakdown, commands, "{figures}");
    for memory in [
        "idle_redis_used_memory_bytes",
        "idle_redis_instance_bytes",
        "idle_redis_bytes_per_partition",
        "idle_engine_rss_bytes",
    ] {
        assert!(number(&figures, memory) > 0.0, "{memory}: {figures}");
    }
    Ok(())
}

#[test]
fn scale_checks_every_key_in_hashed_and_in_per_key_partitions() -> Result<()> {
    let redis = Redis::start_local()?;
    let hashed = bench(
        &redis,
        &[
            "scale",
            "--keys",
            "300",
            "--events-per-key",
            "3",
            "--partitions",
            "8",
            "--publish-batch",
            "50",
            "--window-s",
            "0.5",
            "--settle-s",
            "0.2",
            "--dedup-window-s",
            "0.5",
        ],
    )?;
    assert_eq!(hashed["partitions"], "8", "{hashed}");
    assert_eq!(hashed["events"], 900, "{hashed}");
    assert_eq!(hashed["handled"], 900, "{hashed}");
    for zero in ["lost", "order_violations", "repeats", "keys_short"] {
        assert_eq!(hashed[zero], 0, "{zero}: {hashed}");
    }
    // One lease per hashed partition, none per key.
    assert_eq!(hashed["leases"], 8, "{hashed}");
    assert_eq!(hashed["owned_partitions"], 8, "{hashed}");
    for figure in [
        "publish_msgs_per_s",
        "ordered_msgs_per_s",
        "idle_redis_used_memory_bytes",
        "engine_rss_mb",
        "engine_rss_peak_mb",
    ] {
        assert!(number(&hashed, figure) > 0.0, "{figure}: {hashed}");
    }
    assert!(number(&hashed, "idle_redis_cpu_ms_per_s") >= 0.0, "{hashed}");
    assert!(
        hashed["drain_top_commands"]
            .as_str()
            .is_some_and(|t| t.contains("fcall=")),
        "{hashed}"
    );

    let per_key = bench(
        &redis,
        &[
            "scale",
            "--keys",
            "5",
            "--events-per-key",
            "40",
            "--partitions",
            "per_key",
            "--window-s",
            "0",
        ],
    )?;
    assert_eq!(per_key["partitions"], "per_key", "{per_key}");
    assert_eq!(per_key["handled"], 200, "{per_key}");
    assert_eq!(
        (&per_key["lost"], &per_key["order_violations"]),
        (&0.into(), &0.into()),
        "{per_key}"
    );
    assert_eq!(per_key["leases"], 5, "{per_key}");
    assert_eq!(per_key["owned_partitions"], 5, "{per_key}");
    assert!(
        per_key.get("idle_redis_cpu_ms_per_s").is_none(),
        "--window-s 0: {per_key}"
    );
    Ok(())
}

#[test]
fn failover_measures_a_takeover_per_ttl() -> Result<()> {
    let redis = Redis::start_local()?;
    let figures = bench(
        &redis,
        &[
            "failover", "--ttls", "1500", "--trials", "1", "--keys", "2", "--rate", "50",
        ],
    )?;
    assert_eq!(figures["failover_trials"], 1, "{figures}");
    assert_eq!(figures["failover_keys"], 2, "{figures}");
    let failover = number(&figures, "failover_ms_ttl_1500");
    assert_eq!(
        failover,
        number(&figures, "failover_max_ms_ttl_1500"),
        "{figures}"
    );
    // The survivor cannot start before the dead owner's lease expired.
    assert!(
        failover + 2.0 >= number(&figures, "lease_remaining_ms_ttl_1500"),
        "{figures}"
    );
    Ok(())
}
