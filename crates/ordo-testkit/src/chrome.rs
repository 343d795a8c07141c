//! A private ChromeDriver per test, driving Debian's Chromium headless: the
//! page tests talk WebDriver to [`ChromeDriver::url`].
//!
//! The binaries come from `ORDO_CHROMEDRIVER` and `ORDO_CHROMIUM` (paths,
//! or names looked up on `PATH`), else `chromedriver` and `chromium` on
//! `PATH`.

use std::ffi::OsString;
use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::error::{Result, TestkitError};
use crate::http::NotReady;
use crate::local::free_port;

/// How long ChromeDriver may take to answer `/status` as ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

const INSTALL_HINT: &str = "install them with `apt-get install chromium chromium-driver` (Debian's packages: \
     /usr/bin/chromium and /usr/bin/chromedriver), or set ORDO_CHROMIUM and ORDO_CHROMEDRIVER to their paths";

/// A ChromeDriver for a test, killed on drop (with the browsers it started).
#[derive(Debug)]
pub struct ChromeDriver {
    /// Its log, removed when dropped.
    dir: TempDir,
    child: Child,
    address: SocketAddr,
    chromium: PathBuf,
}

impl ChromeDriver {
    /// Starts `chromedriver` on a free port of 127.0.0.1 and waits until it
    /// is ready; fails, saying how to install them, when it or Chromium is
    /// missing.
    pub fn start() -> Result<Self> {
        let chromium = find("ORDO_CHROMIUM", "chromium")?;
        let driver = find("ORDO_CHROMEDRIVER", "chromedriver")?;
        let dir = tempfile::Builder::new()
            .prefix("ordo-chromedriver-")
            .tempdir()
            .map_err(TestkitError::io("create a temporary directory for chromedriver"))?;
        let address = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let log = dir.path().join("chromedriver.log");
        let output = File::create(&log).map_err(TestkitError::io("create the chromedriver log"))?;
        let child = Command::new(&driver)
            .arg(format!("--port={}", address.port()))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| TestkitError::SpawnChromeDriver {
                program: driver.clone(),
                hint: INSTALL_HINT,
                source,
            })?;
        let mut server = Self {
            dir,
            child,
            address,
            chromium,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Where it serves WebDriver: `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The Chromium it is to drive (the `binary` of `goog:chromeOptions`).
    pub fn chromium(&self) -> &std::path::Path {
        &self.chromium
    }

    /// A fresh profile directory for one browser session.
    pub fn profile_dir(&self) -> PathBuf {
        self.dir.path().join(format!("profile-{}", std::process::id()))
    }

    fn wait_ready(&mut self) -> Result<()> {
        let ready = |body: &str| body.replace(' ', "").contains("\"ready\":true");
        match crate::http::wait_ready(&mut self.child, self.address, "/status", ready, READY_TIMEOUT)? {
            Ok(()) => Ok(()),
            Err(NotReady::Exited(status, waited)) => Err(TestkitError::ChromeDriverNotReady {
                waited,
                detail: format!("it exited ({status}); its log ends with:\n{}", self.log_tail()),
            }),
            Err(NotReady::TimedOut(waited)) => Err(TestkitError::ChromeDriverNotReady {
                waited,
                detail: format!("its log ends with:\n{}", self.log_tail()),
            }),
        }
    }

    fn log_tail(&self) -> String {
        crate::local::tail_of(&self.dir.path().join("chromedriver.log"))
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary named by environment variable `variable` (a path, or a name
/// looked up on PATH), else `name` on PATH.
fn find(variable: &str, name: &str) -> Result<PathBuf> {
    let wanted: OsString = std::env::var_os(variable).unwrap_or_else(|| name.into());
    which::which(&wanted).map_err(|_| TestkitError::ChromeNotFound {
        looked_for: format!("{} on PATH ({variable} unset or wrong)", wanted.to_string_lossy()),
        hint: INSTALL_HINT,
    })
}
