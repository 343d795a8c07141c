//! A TCP proxy between the engine instances and Redis, for the
//! per-connection fault: it holds back the bytes one connection sends to
//! Redis for a while (longer than the instances' command timeout), while
//! every other connection flows. Nothing is reordered or dropped: the held
//! bytes reach Redis, late, in their order.
//!
//! This is the fault a whole-process stall or a Redis outage cannot make:
//! a command the client has given up on (timed out) that still runs later,
//! after commands sent since on other connections of the same pool.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::time::Instant;

/// The connections the proxy relays: id to the hold on its client-to-Redis
/// direction (`Some(until)` while held).
type Connections = Arc<Mutex<BTreeMap<u64, watch::Sender<Option<Instant>>>>>;

/// The proxy; it relays until the runtime ends.
#[derive(Debug)]
pub(crate) struct ConnProxy {
    port: u16,
    connections: Connections,
}

/// The `host:port` of a `redis://[credentials@]host:port[/db]` URL.
fn authority(url: &str) -> Result<(&str, &str, &str, &str)> {
    let (scheme, rest) = url
        .split_once("://")
        .with_context(|| format!("not a Redis URL: {url}"))?;
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let (credentials, address) = match authority.rsplit_once('@') {
        Some((credentials, address)) => (credentials, address),
        None => ("", authority),
    };
    Ok((scheme, credentials, address, path))
}

impl ConnProxy {
    /// A proxy to the Redis at `redis_url`, on `runtime`.
    pub(crate) fn start(runtime: &Handle, redis_url: &str) -> Result<Self> {
        let target = authority(redis_url)?.2.to_owned();
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").context("could not bind the chaos proxy")?;
        listener.set_nonblocking(true)?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let port = listener.local_addr()?.port();
        let connections: Connections = Arc::default();
        let accepted = connections.clone();
        runtime.spawn(async move {
            let mut next = 0_u64;
            while let Ok((client, _)) = listener.accept().await {
                next += 1;
                let id = next;
                let connections = accepted.clone();
                let target = target.clone();
                tokio::spawn(async move {
                    // Redis down (a Redis fault): the client sees the
                    // connection close and reconnects later.
                    let Ok(server) = TcpStream::connect(target.as_str()).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (hold, held) = watch::channel(None);
                    lock(&connections).insert(id, hold);
                    relay(client, server, held).await;
                    lock(&connections).remove(&id);
                });
            }
        });
        Ok(Self { port, connections })
    }

    /// `url` (a `redis://host:port[/db]` URL) pointed at the proxy.
    pub(crate) fn url_for(&self, url: &str) -> Result<String> {
        let (scheme, credentials, _, path) = authority(url)?;
        let at = if credentials.is_empty() { "" } else { "@" };
        Ok(format!(
            "{scheme}://{credentials}{at}127.0.0.1:{}{path}",
            self.port
        ))
    }

    /// How many connections are relayed now.
    pub(crate) fn connections(&self) -> usize {
        lock(&self.connections).len()
    }

    /// Holds back what the `pick`-th live connection (modulo their number)
    /// sends to Redis for `duration`, from its next bytes on; returns the
    /// connection's id, or `None` when there is none.
    pub(crate) fn delay_one(&self, pick: usize, duration: Duration) -> Option<u64> {
        let connections = lock(&self.connections);
        if connections.is_empty() {
            return None;
        }
        let (id, hold) = connections.iter().nth(pick % connections.len())?;
        hold.send_replace(Some(Instant::now() + duration));
        Some(*id)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Relays both ways until either side closes.
async fn relay(client: TcpStream, server: TcpStream, held: watch::Receiver<Option<Instant>>) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = pipe(client_read, server_write, Some(held)) => {}
        () = pipe(server_read, client_write, None) => {}
    }
}

/// Copies `from` to `to`; while `held` names a time to come, what was read
/// waits until then (and so does everything after it).
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    held: Option<watch::Receiver<Option<Instant>>>,
) {
    let mut buffer = vec![0_u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        if let Some(held) = &held {
            let until = *held.borrow();
            if let Some(until) = until
                && until > Instant::now()
            {
                tokio::time::sleep_until(until).await;
            }
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_pointed_at_the_proxy() {
        let proxy = ConnProxy {
            port: 4242,
            connections: Arc::default(),
        };
        assert_eq!(
            proxy.url_for("redis://127.0.0.1:6379").unwrap(),
            "redis://127.0.0.1:4242"
        );
        assert_eq!(
            proxy.url_for("redis://:secret@10.0.0.1:6379/3").unwrap(),
            "redis://:secret@127.0.0.1:4242/3"
        );
        assert!(proxy.url_for("127.0.0.1:6379").is_err());
    }
}
