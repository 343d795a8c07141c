//! `ordo-bench connect`: how long a client takes to connect (TCP, the TLS
//! handshake, `HELLO`/`PING`), over plain TCP and over TLS, to one private
//! `redis-server` listening on both, with certificates made for the run.
//!
//! Figures: `connect_plain_p50_ms`/`_p99_ms`/`_max_ms`, `connect_tls_...`,
//! `connect_mtls_...` (mutual TLS: a client certificate too), and
//! `tls_to_plain_p50_ratio`.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use fred::prelude::{Builder, ClientLike as _};
use fred::types::config::Config as FredConfig;
use ordo_redis::TlsFiles;
use ordo_testkit::{Redis, TestCa};

use crate::latency::LatencyRecorder;
use crate::report::Report;

/// Options of `ordo-bench connect`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// Connections opened (and closed) per kind.
    #[arg(long, default_value = "200")]
    pub connections: usize,
}

/// Runs the three kinds in turn and reports their figures.
pub async fn run(args: &ConnectArgs) -> Result<Report> {
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    let dir = tempfile::tempdir().context("cannot create a directory for the certificates")?;
    let ca = TestCa::new(dir.path(), "ordo-bench-ca")?;
    let (cert, key) = ca.client("ordo-bench")?;
    let plain = tokio::task::spawn_blocking({
        let tls = ca.redis_tls(false)?;
        move || Redis::builder().tls(tls).start()
    })
    .await??;
    let mutual = tokio::task::spawn_blocking({
        let tls = ca.redis_tls(true)?;
        move || Redis::builder().tls(tls).start()
    })
    .await??;
    let tls_url = plain.tls_url().context("a TLS port")?;
    let mtls_url = mutual.tls_url().context("a TLS port")?;

    let mut report = Report::new();
    let plain_p50 = measure(
        &mut report,
        "connect_plain",
        ordo_redis::client_config(&plain.url())?,
        args.connections,
    )
    .await?;
    let tls_p50 = measure(
        &mut report,
        "connect_tls",
        ordo_redis::client_config_with_tls(&tls_url, &TlsFiles::new().ca_file(ca.file()))?,
        args.connections,
    )
    .await?;
    measure(
        &mut report,
        "connect_mtls",
        ordo_redis::client_config_with_tls(
            &mtls_url,
            &TlsFiles::new().ca_file(ca.file()).client_certificate(cert, key),
        )?,
        args.connections,
    )
    .await?;
    report.ratio(
        "tls_to_plain_p50_ratio",
        tls_p50.as_secs_f64() / plain_p50.as_secs_f64().max(f64::EPSILON),
    );
    Ok(report)
}

/// Opens `count` clients with `config` one after another, each connected
/// and answering PING, then closed; adds `{prefix}_*` figures; the median.
async fn measure(report: &mut Report, prefix: &str, config: FredConfig, count: usize) -> Result<Duration> {
    let mut samples = LatencyRecorder::with_capacity(count);
    for _ in 0..count {
        let client = Builder::from_config(config.clone()).build()?;
        let started = Instant::now();
        client
            .init()
            .await
            .with_context(|| format!("{prefix}: cannot connect"))?;
        let _: String = client.ping(None).await?;
        samples.record(started.elapsed());
        client.quit().await?;
    }
    let summary = samples.summary().context("no samples")?;
    summary.add_to(report, prefix);
    Ok(summary.p50)
}
