//! A private Prometheus per test: `prometheus` (Debian's package) on a free
//! port of 127.0.0.1, with its own data directory, scraping the targets it
//! is given every second.
//!
//! The binary comes from `ORDO_PROMETHEUS` (a path, or a name looked up on
//! `PATH`), else `prometheus` on `PATH`.

use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use tempfile::TempDir;

use crate::error::{Result, TestkitError};
use crate::http::NotReady;
use crate::local::free_port;

/// How long a fresh server may take to answer `/-/ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const LOG_FILE: &str = "prometheus.log";

const INSTALL_HINT: &str = "install it with `apt-get install prometheus` (Debian's package; the tests start \
     their own server, the packaged service need not run), or set ORDO_PROMETHEUS=/path/to/prometheus";

/// A Prometheus server for a test, killed and its directory removed on drop.
#[derive(Debug)]
pub struct Prometheus {
    /// Removed (with the data) when dropped, after the server stopped.
    _dir: TempDir,
    child: Child,
    address: SocketAddr,
    log_path: PathBuf,
}

impl Prometheus {
    /// Starts a server that scrapes `targets` (their `/metrics`) every
    /// second, as job `ordo`, and waits until it is ready.
    pub fn start(targets: &[SocketAddr]) -> Result<Self> {
        let program = find_prometheus()?;
        let dir = tempfile::Builder::new()
            .prefix("ordo-prometheus-")
            .tempdir()
            .map_err(TestkitError::io("create a temporary directory for prometheus"))?;
        let targets: Vec<String> = targets.iter().map(|target| format!("'{target}'")).collect();
        let config = dir.path().join("prometheus.yml");
        fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: ordo\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .map_err(TestkitError::io("write prometheus.yml"))?;
        let address = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let log_path = dir.path().join(LOG_FILE);
        let log = File::create(&log_path).map_err(TestkitError::io("create the prometheus log"))?;
        let errors = log
            .try_clone()
            .map_err(TestkitError::io("share the prometheus log"))?;
        let child = Command::new(&program)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(errors)
            .spawn()
            .map_err(|source| TestkitError::SpawnPrometheus {
                program: program.clone(),
                hint: INSTALL_HINT,
                source,
            })?;
        let mut server = Self {
            _dir: dir,
            child,
            address,
            log_path,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Where it serves: `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The answer of its HTTP API to the instant query `promql`
    /// (`/api/v1/query`): the JSON body as text, whatever its status.
    pub fn query(&self, promql: &str) -> Result<String> {
        let path = format!(
            "/api/v1/query?query={}",
            utf8_percent_encode(promql, NON_ALPHANUMERIC)
        );
        self.get(&path).map(|(_, body)| body)
    }

    /// `GET path`: the status code and the body.
    fn get(&self, path: &str) -> Result<(u16, String)> {
        crate::http::get(self.address, path)
    }

    fn wait_ready(&mut self) -> Result<()> {
        match crate::http::wait_ready(&mut self.child, self.address, "/-/ready", |_| true, READY_TIMEOUT)? {
            Ok(()) => Ok(()),
            Err(NotReady::Exited(status, _)) => Err(TestkitError::PrometheusExited {
                status,
                log_tail: self.log_tail(),
            }),
            Err(NotReady::TimedOut(waited)) => Err(TestkitError::PrometheusNotReady {
                waited,
                log_tail: self.log_tail(),
            }),
        }
    }

    /// The last lines of its log.
    fn log_tail(&self) -> String {
        crate::local::tail_of(&self.log_path)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ORDO_PROMETHEUS` (a path, or a name looked up on PATH), else `prometheus` on PATH.
fn find_prometheus() -> Result<PathBuf> {
    let name = std::env::var_os("ORDO_PROMETHEUS").unwrap_or_else(|| "prometheus".into());
    which::which(&name).map_err(|_| TestkitError::PrometheusNotFound {
        looked_for: format!("{} on PATH", name.to_string_lossy()),
        hint: INSTALL_HINT,
    })
}
