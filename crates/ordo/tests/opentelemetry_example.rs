//! The OpenTelemetry example (`examples/opentelemetry.rs`) runs on a real
//! Redis, exports its spans over OTLP/HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT`
//! and exits 0. The collector here is a plain HTTP listener that records
//! what is posted to `/v1/traces`: the protobuf names the service and the
//! spans. (`cargo test --features otel` builds the example first.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

/// The example binary, built beside this test's.
fn example() -> PathBuf {
    ordo_testkit::example_binary("opentelemetry")
}

/// One HTTP request as the collector received it: its request line and body.
type Posted = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// Answers every request with 200 and an empty body (an empty
/// `ExportTraceServiceResponse`), recording it.
fn collector(listener: TcpListener, posted: Posted) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            continue;
        }
        posted.lock().unwrap().push((line.trim().to_owned(), body));
        let _ = stream.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
    }
}

#[test]
fn the_example_exports_its_trace_over_otlp_http_and_exits_0() -> anyhow::Result<()> {
    let redis = ordo_testkit::Redis::start()?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let endpoint = format!("http://{}", listener.local_addr()?);
    let posted = Posted::default();
    let recorded = posted.clone();
    std::thread::spawn(move || collector(listener, recorded));

    let output = Command::new(example())
        .env("REDIS_URL", redis.url())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_SERVICE_NAME", "ordo-otel-test")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the example failed: {}\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("3 orders placed, shipped and tracked"),
        "{stdout}"
    );

    let posted = posted.lock().unwrap();
    assert!(!posted.is_empty(), "nothing was exported to {endpoint}: {stderr}");
    let mut everything = Vec::new();
    for (line, body) in posted.iter() {
        assert!(line.starts_with("POST /v1/traces "), "{line}");
        everything.extend_from_slice(body);
    }
    let text = String::from_utf8_lossy(&everything);
    for expected in [
        "ordo-otel-test",
        "checkout",
        "publish order",
        "process order",
        "process order.commands",
        "messaging.destination.name",
    ] {
        assert!(text.contains(expected), "no `{expected}` in what was exported");
    }
    Ok(())
}
