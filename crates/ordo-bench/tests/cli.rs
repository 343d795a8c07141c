//! The real `ordo-bench` binary against a real Redis.

use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use fred::prelude::ClientLike as _;
use fred::types::{ClusterHash, CustomCommand};
use ordo_bench::redis::TlsPaths;
use ordo_testkit::Redis;

#[test]
fn baseline_drains_every_event_and_prints_json() -> Result<()> {
    let redis = Redis::start()?;
    let output = Command::new(env!("CARGO_BIN_EXE_ordo-bench"))
        .args([
            "baseline",
            "--events",
            "2000",
            "--keys",
            "8",
            "--json",
            "--redis-url",
        ])
        .arg(redis.url())
        .output()?;
    let stdout = String::from_utf8(output.stdout)?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        output.status.success(),
        "ordo-bench failed: {}\n{stderr}",
        output.status
    );

    let figures: serde_json::Value =
        serde_json::from_str(&stdout).with_context(|| format!("stdout is not JSON: {stdout:?}"))?;
    assert_eq!(figures["events"], 2000, "{stdout}");
    assert_eq!(figures["keys"], 8, "{stdout}");
    assert_eq!(figures["batch"], 64, "{stdout}");
    assert_eq!(figures["consumers"], 1, "{stdout}");
    let rate = figures["baseline_msgs_per_s"]
        .as_f64()
        .context("no baseline_msgs_per_s")?;
    assert!(rate > 0.0, "{stdout}");
    assert!(
        figures["elapsed_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{stdout}"
    );
    Ok(())
}

#[test]
fn baseline_prints_one_figure_per_line_and_leaves_no_stream_behind() -> Result<()> {
    // Its own server: the check for leftover keys must not see another run's.
    let redis = Redis::start_local()?;
    let output = Command::new(env!("CARGO_BIN_EXE_ordo-bench"))
        .args([
            "baseline",
            "--events",
            "500",
            "--keys",
            "4",
            "--batch",
            "7",
            "--consumers",
            "3",
        ])
        .env("REDIS_URL", redis.url())
        .output()?;
    let stdout = String::from_utf8(output.stdout)?;
    ensure!(
        output.status.success(),
        "ordo-bench failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let names: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "baseline_msgs_per_s",
            "events",
            "keys",
            "batch",
            "consumers",
            "elapsed_ms",
            "fill_msgs_per_s"
        ],
        "{stdout}"
    );
    assert!(stdout.contains("events: 500\n"), "{stdout}");
    assert!(stdout.contains("consumers: 3\n"), "{stdout}");

    let leftovers: Vec<String> = tokio::runtime::Runtime::new()?.block_on(async {
        let client = ordo_bench::redis::connect(&redis.url(), &TlsPaths::default()).await?;
        let keys = client
            .custom(
                CustomCommand::new_static("KEYS", ClusterHash::Random, false),
                vec!["ordo-bench:baseline:*"],
            )
            .await?;
        anyhow::Ok(keys)
    })?;
    assert_eq!(leftovers, Vec::<String>::new());
    Ok(())
}

#[test]
fn a_url_with_an_acl_user_and_password_is_used_and_never_printed() -> Result<()> {
    const PASSWORD: &str = "b3nch-Pa55word";
    let redis = Redis::start_local()?;
    redis.create_user("bench", PASSWORD)?;
    let address = redis.url().trim_start_matches("redis://").to_owned();
    let url = format!("redis://bench:{PASSWORD}@{address}/0");
    for (how, flag) in [("--redis-url", true), ("REDIS_URL", false)] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ordo-bench"));
        command.args(["baseline", "--events", "200", "--keys", "4"]);
        if flag {
            command.args(["--redis-url", &url]);
        } else {
            command.env("REDIS_URL", &url);
        }
        let output = command.output()?;
        let stdout = String::from_utf8(output.stdout)?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        ensure!(
            output.status.success(),
            "ordo-bench with the URL in {how} failed: {}\n{stderr}",
            output.status
        );
        assert!(stdout.contains("events: 200\n"), "{how}: {stdout}");
        assert!(
            !stdout.contains(PASSWORD) && !stderr.contains(PASSWORD),
            "{how} shows the password:\n{stdout}\n{stderr}"
        );
    }
    // A wrong password is refused, and not shown either.
    let wrong = format!("redis://bench:wr0ng-{PASSWORD}@{address}/0");
    let output = Command::new(env!("CARGO_BIN_EXE_ordo-bench"))
        .args(["baseline", "--events", "10", "--redis-url", &wrong])
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(!output.status.success(), "a wrong password was accepted");
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    Ok(())
}

/// Runs `ordo-bench` with `args`; its stdout and stderr, failing with both if it failed.
fn bench_ok(args: &[&str]) -> Result<(String, String)> {
    let output = Command::new(env!("CARGO_BIN_EXE_ordo-bench"))
        .args(args)
        .env_remove("REDIS_URL")
        .output()?;
    let stdout = String::from_utf8(output.stdout)?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    ensure!(
        output.status.success(),
        "ordo-bench {args:?} failed: {}\n{stdout}\n{stderr}",
        output.status
    );
    Ok((stdout, stderr))
}

#[test]
fn tls_makes_the_private_redis_a_tls_one_and_the_run_uses_it() -> Result<()> {
    let (stdout, _) = bench_ok(&["baseline", "--tls", "--events", "300", "--keys", "4"])?;
    assert!(stdout.contains("events: 300\n"), "{stdout}");
    // The engines (RedisBroker) too.
    let (stdout, _) = bench_ok(&[
        "throughput",
        "--tls",
        "--events",
        "300",
        "--keys",
        "4",
        "--instances",
        "1",
    ])?;
    assert!(stdout.contains("events: 300"), "{stdout}");
    Ok(())
}

#[test]
fn worker_processes_get_the_tls_files() -> Result<()> {
    // `failover` runs `ordo-bench worker` processes: they reach the TLS-only
    // URL only with the run's CA file, which travels by environment.
    let (stdout, _) = bench_ok(&[
        "failover", "--tls", "--ttls", "2000", "--trials", "1", "--keys", "2", "--rate", "50",
    ])?;
    assert!(stdout.contains("failover_ms_ttl_2000: "), "{stdout}");
    Ok(())
}

#[test]
fn a_rediss_url_with_mutual_tls_files_works_and_a_wrong_ca_is_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = ordo_testkit::TestCa::new(dir.path(), "bench-ca")?;
    let other = ordo_testkit::TestCa::new(dir.path(), "other-ca")?;
    let (cert, key) = ca.client("bench-client")?;
    // Clients must present a certificate of `ca`: the run works only if every
    // client it makes (and its engines) uses the files.
    let redis = Redis::builder().tls(ca.redis_tls(true)?).start()?;
    let url = redis.tls_url().context("no TLS port")?;
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let (ca_file, other_file, cert, key) = (path(ca.file()), path(other.file()), path(&cert), path(&key));
    let (stdout, _) = bench_ok(&[
        "throughput",
        "--events",
        "300",
        "--keys",
        "4",
        "--instances",
        "1",
        "--redis-url",
        &url,
        "--tls-ca-file",
        &ca_file,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
    ])?;
    assert!(stdout.contains("events: 300"), "{stdout}");

    let output = Command::new(env!("CARGO_BIN_EXE_ordo-bench"))
        .args(["baseline", "--events", "100", "--keys", "4"])
        .args(["--redis-url", &url, "--tls-ca-file", &other_file])
        .args(["--tls-cert-file", &cert, "--tls-key-file", &key])
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a wrong CA was accepted: {stderr}");
    assert!(
        stderr.contains(&format!("could not connect to Redis at {url}")) && stderr.contains("UnknownIssuer"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn sweep_prints_a_ratio_per_key_count_and_plots_it_beside_a_previous_build() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (points, svg) = (dir.path().join("before.json"), dir.path().join("ratio.svg"));
    let points_arg = points.to_str().context("a UTF-8 temp path")?;
    let (stdout, _) = bench_ok(&[
        "sweep", "--events", "400", "--keys", "1,4", "--label", "before", "--points", points_arg,
    ])?;
    for figure in [
        "ratio_keys_1: ",
        "ratio_keys_4: ",
        "ordered_msgs_per_s_keys_4: ",
        "redis_cpu_us_per_msg_keys_4: ",
    ] {
        assert!(stdout.contains(figure), "{figure} missing: {stdout}");
    }
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&points)?)?;
    assert_eq!(saved["label"], "before", "{saved}");
    assert_eq!(saved["points"].as_array().map(Vec::len), Some(2), "{saved}");

    let svg_arg = svg.to_str().context("a UTF-8 temp path")?;
    bench_ok(&[
        "sweep",
        "--events",
        "400",
        "--keys",
        "1,4",
        "--label",
        "after",
        "--previous",
        points_arg,
        "--svg",
        svg_arg,
    ])?;
    let drawn = std::fs::read_to_string(&svg)?;
    assert!(drawn.starts_with("<svg"), "{drawn}");
    assert_eq!(
        drawn.matches("<polyline").count(),
        2,
        "both builds drawn: {drawn}"
    );
    assert!(
        drawn.contains(">before</text>") && drawn.contains(">after</text>"),
        "{drawn}"
    );
    Ok(())
}
