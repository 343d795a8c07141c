//! The Grafana dashboard (`docs/grafana/ordo-dashboard.json`) against a real
//! Prometheus scraping the Prometheus example (`examples/prometheus.rs`) on
//! a real Redis: every query of every panel is valid PromQL, and the panels
//! an operator watches first (throughput, lag, halted keys, failures,
//! leases, partitions) show what the example does: it handles orders and
//! halts a client's key on every 25th. (`cargo test` builds the example.)

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use ordo_testkit::{Process, Prometheus, Redis};
use serde_json::Value;

/// The example binary, built beside this test's.
fn example() -> PathBuf {
    ordo_testkit::example_binary("prometheus")
}

/// The dashboard as Grafana reads it.
fn dashboard() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/grafana/ordo-dashboard.json"
    );
    let text = std::fs::read_to_string(path).expect("docs/grafana/ordo-dashboard.json");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Each panel's title and its queries, with Grafana's variables as the
/// dashboard's defaults set them: every category, a 30 s rate window.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|panel| {
            let title = panel["title"].as_str().expect("a title").to_owned();
            panel["targets"]
                .as_array()
                .expect("targets")
                .iter()
                .map(move |target| {
                    let expr = target["expr"]
                        .as_str()
                        .expect("a PromQL expression")
                        .replace("$category", ".+")
                        .replace("$__rate_interval", "30s");
                    (title.clone(), expr)
                })
        })
        .collect()
}

/// The answer to `promql`: its result vector (the query must succeed).
fn answer(prometheus: &Prometheus, promql: &str) -> anyhow::Result<Vec<Value>> {
    let body = prometheus.query(promql)?;
    let json: Value = serde_json::from_str(&body).map_err(|error| anyhow::anyhow!("{error}: {body}"))?;
    anyhow::ensure!(json["status"] == "success", "`{promql}` failed: {body}");
    Ok(json["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// The largest sample value of a result vector.
fn largest(result: &[Value]) -> f64 {
    result
        .iter()
        .filter_map(|sample| sample["value"][1].as_str()?.parse::<f64>().ok())
        .fold(f64::NEG_INFINITY, f64::max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_answers_from_a_real_prometheus_scraping_the_example() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let metrics: SocketAddr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?
    };
    let mut command = Command::new(example());
    command
        .env("REDIS_URL", redis.url())
        .env("ORDO_METRICS_ADDR", metrics.to_string())
        .env("ORDO_EXAMPLE_SECONDS", "300");
    let mut example = Process::spawn(command)?;
    example.wait_for_line(
        |line| line.contains("metrics on http://"),
        Duration::from_secs(30),
    )?;
    let prometheus = Prometheus::start(&[metrics])?;

    // The example halts a key on its 25th order (2.5 s in); its collector
    // reads the halted partitions from Redis every 5 s.
    ordo_testkit::eventually(
        Duration::from_secs(90),
        "Prometheus to have scraped handled orders and a halted key",
        || {
            let handled = answer(&prometheus, "sum(rate(ordo_messages_handled_total[30s]))");
            let halted = answer(&prometheus, "sum(ordo_halted_partitions)");
            async move { Ok(largest(&handled?) > 0.0 && largest(&halted?) >= 1.0) }
        },
    )
    .await?;

    let dashboard = dashboard();
    let queries = queries(&dashboard);
    assert!(queries.len() >= 12, "{queries:#?}");
    // Every query is valid PromQL; the panels an operator reads first have data.
    let mut with_data = BTreeSet::new();
    for (title, expr) in &queries {
        if !answer(&prometheus, expr)?.is_empty() {
            with_data.insert(title.as_str());
        }
    }
    for title in [
        "Halted keys",
        "Lag",
        "Handled per second",
        "Failovers (last hour)",
        "Throughput by handler",
        "Lag by handler",
        "Halted keys by handler",
        "Failed attempts",
        "Failovers and leases",
        "Handler duration",
        "Partitions",
    ] {
        assert!(
            with_data.contains(title),
            "the panel `{title}` shows nothing; panels with data: {with_data:?}"
        );
    }
    let halted = queries
        .iter()
        .find(|(title, _)| title == "Halted keys")
        .expect("the halted keys panel");
    assert!(
        largest(&answer(&prometheus, &halted.1)?) >= 1.0,
        "the halted keys panel counts the halted key"
    );
    // The category variable's values: the example's category.
    let categories = answer(&prometheus, "count by (category) (ordo_messages_handled_total)")?;
    assert!(
        categories
            .iter()
            .any(|sample| sample["metric"]["category"] == "order"),
        "{categories:?}"
    );
    example.terminate()?;
    Ok(())
}
