//! Health and readiness probes over HTTP, from `RunningDomain::health()`:
//! `cargo run -p ordo --example health_probes [ADDR]` (default
//! `127.0.0.1:8080`), then
//!
//! ```sh
//! curl -i localhost:8080/livez    # 200 while the consumer runs, else 503
//! curl -i localhost:8080/readyz   # 200 unless a subscription is `unknown`, else 503
//! curl -s localhost:8080/health   # the whole report as JSON
//! ```
//!
//! The domain runs on the inline broker, so nothing else is needed; with
//! the Redis broker the code is the same and the report also covers lag,
//! in-flight ages, Redis reachability and lease renewals. One of the orders
//! it raises is poison: its key halts, so `/health` shows `halted` with the
//! reason while both probes stay 200 (a halt needs an operator, not a
//! restart). Ctrl-C stops it.
//!
//! The server guards the engine it runs beside: a failed `accept` (out of
//! file descriptors, say) is logged and retried after a pause rather than
//! ending the process; at most 64 connections are served at once (more
//! wait in the kernel's backlog); a client gets 5 s to send its request
//! headers and 30 s for its whole connection.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use ordo::RunningDomain;
use ordo::prelude::*;

/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may last, keep-alive included.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// The pause after a failed `accept` (no file descriptor left, say).
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

#[derive(Aggregate)]
struct Order;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    #[aggregate_id]
    order_id: String,
    client_id: String,
    poison: bool,
}

#[derive(Clone, Default)]
struct OrderProjector;

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl OrderProjector {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, _ctx: &HandlerContext) -> anyhow::Result<()> {
        anyhow::ensure!(!event.poison, "order {} cannot be projected", event.order_id);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter("ordo_core=warn,health_probes=info")
        .with_writer(std::io::stderr)
        .init();
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let config =
        Config::from_toml_str("[server.partitioning]\nmax_retries = 1\nretry_backoff_initial_ms = 10\n")?;
    let domain = Domain::builder()
        .aggregate::<Order>()
        .event_handler(OrderProjector)
        .config(config)
        .init()?;
    let running = Arc::new(domain.start());
    let mut uow = domain.unit_of_work();
    for (order, client, poison) in [
        ("o-1", "alice", false),
        ("o-2", "bob", true),
        ("o-3", "bob", false),
    ] {
        uow.raise(OrderPlaced {
            order_id: order.to_owned(),
            client_id: client.to_owned(),
            poison,
        })?;
    }
    uow.commit().await?;

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("serving /livez, /readyz and /health on http://{addr} (Ctrl-C or SIGTERM to stop)");
    // SIGTERM too: what `kill`, systemd and a Kubernetes pod's stop send.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        () = serve(listener, Arc::clone(&running)) => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    if let Some(running) = Arc::into_inner(running) {
        running.shutdown().await?;
    }
    Ok(())
}

/// Serves the probes on `listener` until the process ends. Nothing a
/// client does ends it: a failed accept is logged and retried, connections
/// beyond [`MAX_CONNECTIONS`] wait their turn, and slow ones time out.
async fn serve(listener: tokio::net::TcpListener, running: Arc<RunningDomain>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // EMFILE, ENFILE, ENOBUFS...: the process stays up, the
                // engine beside it too; accepting resumes when it can.
                tracing::warn!(%error, "accepting a probe connection failed; retrying");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let running = Arc::clone(&running);
        tokio::spawn(async move {
            let service = service_fn(move |request| probe(Arc::clone(&running), request));
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::debug!(%error, "probe connection error"),
                Err(_) => tracing::debug!("probe connection closed after {CONNECTION_TIMEOUT:?}"),
            }
            drop(slot);
        });
    }
}

/// Answers one probe request from a fresh health report.
async fn probe(
    running: Arc<RunningDomain>,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let report = running.health().await;
    let (status, body) = match request.uri().path() {
        "/livez" => verdict(report.live()),
        "/readyz" => verdict(report.ready()),
        "/health" => (
            StatusCode::OK,
            serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "try /livez, /readyz or /health\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    Ok(response)
}

fn verdict(ok: bool) -> (StatusCode, String) {
    if ok {
        (StatusCode::OK, "ok\n".to_owned())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ok\n".to_owned())
    }
}
