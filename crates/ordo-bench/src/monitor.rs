//! [`CommandMonitor`]: the commands clients *send*, counted with `MONITOR`.
//!
//! Redis's `INFO` counters include what Lua scripts run (see
//! [`crate::stats`]), so they cannot say how many commands an instance sends.
//! `MONITOR` can: Redis reports every command it executes with the client
//! that sent it, and marks a script's commands as coming from `lua`. The
//! monitor counts the others per client address and per command name.
//!
//! `MONITOR` costs Redis a formatted line per command, so use it to measure
//! quiet windows (an idle instance), not throughput.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use fred::types::config::{Config, ServerConfig};

/// How long connecting and the replies to `AUTH`/`MONITOR` may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Commands seen over a window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandCounts {
    /// The window's length.
    pub elapsed: Duration,
    /// Commands sent by clients (not run by scripts).
    pub client_commands: u64,
    /// Commands run inside Lua scripts.
    pub script_commands: u64,
    /// Client commands per client address (`127.0.0.1:53122`).
    pub by_client: BTreeMap<String, u64>,
    /// Client commands per command name, lower case (`evalsha`, `xreadgroup`).
    pub by_command: BTreeMap<String, u64>,
}

impl CommandCounts {
    /// Adds `other`'s counts (another node's, over the same window).
    pub fn merge(&mut self, other: CommandCounts) {
        self.elapsed = self.elapsed.max(other.elapsed);
        self.client_commands += other.client_commands;
        self.script_commands += other.script_commands;
        for (client, n) in other.by_client {
            *self.by_client.entry(client).or_default() += n;
        }
        for (command, n) in other.by_command {
            *self.by_command.entry(command).or_default() += n;
        }
    }

    /// Client commands per second over the window.
    pub fn client_commands_per_s(&self) -> f64 {
        crate::report::rate(self.client_commands, self.elapsed)
    }

    /// Counts one `MONITOR` line; lines that are not command reports are ignored.
    fn record(&mut self, line: &str) {
        let Some((client, command)) = parse_line(line) else {
            return;
        };
        if client == "lua" {
            self.script_commands += 1;
            return;
        }
        self.client_commands += 1;
        *self.by_client.entry(client.to_owned()).or_default() += 1;
        *self.by_command.entry(command.to_ascii_lowercase()).or_default() += 1;
    }
}

/// A `MONITOR` connection counting commands on a thread of its own.
#[derive(Debug)]
pub struct CommandMonitor {
    counts: Arc<Mutex<(Instant, CommandCounts)>>,
    stream: TcpStream,
    reader: Option<JoinHandle<()>>,
}

impl CommandMonitor {
    /// Connects to `url`, authenticates if it names credentials, and starts
    /// counting once Redis has confirmed `MONITOR`. Blocks while it connects.
    pub fn start(url: &str) -> Result<Self> {
        let config = ordo_redis::client_config(url)?;
        let ServerConfig::Centralized { server } = &config.server else {
            bail!("MONITOR needs a single Redis server, not {url} (a cluster has one per primary: start_on)");
        };
        Self::start_on(&config, &server.host, server.port)
    }

    /// Like [`CommandMonitor::start`], on the server at `host:port` with the
    /// credentials of `config` (one primary of a cluster).
    pub fn start_on(config: &Config, host: &str, port: u16) -> Result<Self> {
        if config.tls.is_some() {
            bail!("MONITOR counting speaks plain TCP: run this benchmark without TLS (--tls / rediss://)");
        }
        let address = format!("{host}:{port}");
        let stream = TcpStream::connect(&address)
            .with_context(|| format!("could not connect to Redis at {address}"))?;
        stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        if let Some(password) = &config.password {
            let mut auth = vec!["AUTH"];
            auth.extend(config.username.as_deref());
            auth.push(password);
            expect_ok(&stream, &mut reader, &auth)?;
        }
        expect_ok(&stream, &mut reader, &["MONITOR"])?;
        stream.set_read_timeout(None)?;

        let counts = Arc::new(Mutex::new((Instant::now(), CommandCounts::default())));
        let shared = Arc::clone(&counts);
        let reader = std::thread::Builder::new()
            .name("redis-monitor".to_owned())
            .spawn(move || count_lines(reader, &shared))
            .context("could not start the MONITOR thread")?;
        Ok(Self {
            counts,
            stream,
            reader: Some(reader),
        })
    }

    /// The counts since the monitor started or since the last `take`, which
    /// starts a new window.
    pub fn take(&self) -> CommandCounts {
        let mut guard = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let (since, counts) = &mut *guard;
        let now = Instant::now();
        let mut taken = std::mem::take(counts);
        taken.elapsed = now.saturating_duration_since(*since);
        *since = now;
        taken
    }

    /// Counts over `window` from now: a fresh window is started, and taken
    /// after `window` has passed.
    pub async fn measure(&self, window: Duration) -> CommandCounts {
        self.take();
        tokio::time::sleep(window).await;
        self.take()
    }
}

impl Drop for CommandMonitor {
    fn drop(&mut self) {
        // Closing the socket ends the reader's blocking read.
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// Sends `command` as a RESP array and expects `+OK`.
fn expect_ok(mut stream: &TcpStream, reader: &mut BufReader<TcpStream>, command: &[&str]) -> Result<()> {
    let mut request = format!("*{}\r\n", command.len());
    for arg in command {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())?;
    let mut reply = String::new();
    reader
        .read_line(&mut reply)
        .with_context(|| format!("no reply from Redis to {}", command[0]))?;
    if reply.trim_end() != "+OK" {
        bail!("Redis answered {} with {:?}", command[0], reply.trim_end());
    }
    Ok(())
}

/// Counts lines until the connection closes.
fn count_lines(reader: BufReader<TcpStream>, counts: &Mutex<(Instant, CommandCounts)>) {
    for line in reader.lines() {
        let Ok(line) = line else { return };
        let mut guard = counts.lock().unwrap_or_else(PoisonError::into_inner);
        guard.1.record(&line);
    }
}

/// `+1700000000.123456 [0 127.0.0.1:53122] "evalsha" "ab.." "1"` ->
/// `("127.0.0.1:53122", "evalsha")`; a script's commands come from `lua`.
fn parse_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix('+')?;
    let (_, rest) = rest.split_once('[')?;
    let (source, rest) = rest.split_once("] \"")?;
    let (_db, client) = source.split_once(' ')?;
    let (command, _) = rest.split_once('"')?;
    Some((client, command))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_client_and_command() {
        assert_eq!(
            parse_line(r#"+1700000000.123456 [0 127.0.0.1:53122] "EVALSHA" "ab" "1" "k""#),
            Some(("127.0.0.1:53122", "EVALSHA"))
        );
        assert_eq!(
            parse_line(r#"+1700000000.123456 [3 lua] "pexpire" "lease" "15000""#),
            Some(("lua", "pexpire"))
        );
        assert_eq!(
            parse_line(r#"+1.5 [0 unix:/tmp/redis.sock] "ping""#),
            Some(("unix:/tmp/redis.sock", "ping"))
        );
        assert_eq!(parse_line("+OK"), None);
    }

    #[test]
    fn counts_client_commands_apart_from_script_commands() {
        let mut counts = CommandCounts::default();
        for line in [
            r#"+1.0 [0 127.0.0.1:1] "evalsha" "ab" "1" "k""#,
            r#"+1.0 [0 lua] "get" "k""#,
            r#"+1.0 [0 lua] "pexpire" "k" "10""#,
            r#"+1.1 [0 127.0.0.1:2] "XREADGROUP" "GROUP" "g""#,
            r#"+1.2 [0 127.0.0.1:1] "evalsha" "ab" "1" "k""#,
            "+OK",
        ] {
            counts.record(line);
        }
        assert_eq!(counts.client_commands, 3);
        assert_eq!(counts.script_commands, 2);
        assert_eq!(
            counts.by_client,
            BTreeMap::from([("127.0.0.1:1".to_owned(), 2), ("127.0.0.1:2".to_owned(), 1)])
        );
        assert_eq!(
            counts.by_command,
            BTreeMap::from([("evalsha".to_owned(), 2), ("xreadgroup".to_owned(), 1)])
        );
    }
}
