//! A TCP proxy in front of a real Redis that fails the way networks do:
//! it can lose one reply (and drop that connection), delay one command on
//! its connection (the others flow), or partition the client from Redis
//! (connections stay open and nothing gets through, so commands time out)
//! until healed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::Client;
use fred::prelude::{Builder, ClientLike, Config};
use fred::types::config::ReconnectPolicy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The proxy; it runs until the test's runtime ends.
pub struct Proxy {
    port: u16,
    lose_reply: Arc<AtomicBool>,
    delay: Arc<Delay>,
    open: watch::Sender<bool>,
}

/// A command to hold back: the bytes to recognise it by, and for how long.
#[derive(Default)]
struct Delay {
    pending: Mutex<Option<(Vec<u8>, Duration)>>,
    delivered: AtomicBool,
}

impl Proxy {
    /// A proxy to the Redis on `redis_port` (loopback).
    pub async fn start(redis_port: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let lose_reply = Arc::new(AtomicBool::new(false));
        let delay = Arc::new(Delay::default());
        let (open, _) = watch::channel(true);
        let (lose, delayed, opened) = (lose_reply.clone(), delay.clone(), open.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", redis_port)).await else {
                    continue;
                };
                tokio::spawn(relay(
                    client,
                    server,
                    lose.clone(),
                    delayed.clone(),
                    opened.subscribe(),
                ));
            }
        });
        Ok(Self {
            port,
            lose_reply,
            delay,
            open,
        })
    }

    /// The next command whose bytes contain `pattern` is held back `delay`
    /// on its connection (that connection's later bytes wait behind it;
    /// other connections flow), then delivered.
    pub fn delay_next_containing(&self, pattern: &str, delay: Duration) {
        self.delay.delivered.store(false, Ordering::SeqCst);
        *self.delay.pending.lock().unwrap() = Some((pattern.as_bytes().to_vec(), delay));
    }

    /// Whether the delayed command has been delivered to Redis.
    pub fn delayed_delivered(&self) -> bool {
        self.delay.delivered.load(Ordering::SeqCst)
    }

    /// The URL clients connect to.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A client through the proxy that, when its connection drops,
    /// reconnects after `reconnect_delay_ms` and resends the commands that
    /// were in flight (fred's default of three attempts).
    pub async fn resending_client(&self, reconnect_delay_ms: u32) -> anyhow::Result<Client> {
        let client = Builder::from_config(Config::from_url(&self.url())?)
            .set_policy(ReconnectPolicy::new_constant(0, reconnect_delay_ms))
            .build()?;
        client.init().await?;
        Ok(client)
    }

    /// The next reply from Redis is not forwarded, and its connection is
    /// dropped: the command ran, the client does not know.
    pub fn lose_next_reply(&self) {
        self.lose_reply.store(true, Ordering::SeqCst);
    }

    /// Whether the reply to lose has been lost.
    pub fn reply_lost(&self) -> bool {
        !self.lose_reply.load(Ordering::SeqCst)
    }

    /// Stops forwarding anything, on every connection, old and new.
    pub fn partition(&self) {
        self.open.send_replace(false);
    }

    /// Ends the partition: the connections it held are closed (clients see
    /// them drop and reconnect), new ones are forwarded.
    pub fn heal(&self) {
        self.open.send_replace(true);
    }
}

/// Relays both ways until either side closes, a reply is lost, or a
/// partition ends.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    lose: Arc<AtomicBool>,
    delay: Arc<Delay>,
    open: watch::Receiver<bool>,
) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let no_loss = Arc::new(AtomicBool::new(false));
    tokio::select! {
        () = pipe(client_read, server_write, no_loss, Some(delay), open.clone()) => {}
        () = pipe(server_read, client_write, lose, None, open) => {}
    }
}

/// Copies `from` to `to` while the network is open. Returns (dropping both)
/// when `from` closes, when a chunk is to be lost, or when a partition that
/// held this connection ends.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    lose: Arc<AtomicBool>,
    delay: Option<Arc<Delay>>,
    mut open: watch::Receiver<bool>,
) {
    let mut buffer = vec![0_u8; 64 * 1024];
    loop {
        if !*open.borrow_and_update() {
            let _ = open.wait_for(|open| *open).await;
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            changed = open.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
        };
        let read = match read {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        if lose.swap(false, Ordering::SeqCst) {
            return;
        }
        let mut held = false;
        if let Some(delay) = &delay {
            let hold = {
                let mut pending = delay.pending.lock().unwrap();
                let matches = pending.as_ref().is_some_and(|(pattern, _)| {
                    buffer[..read]
                        .windows(pattern.len())
                        .any(|w| w == pattern.as_slice())
                });
                if matches {
                    pending.take().map(|(_, d)| d)
                } else {
                    None
                }
            };
            if let Some(duration) = hold {
                tokio::time::sleep(duration).await;
                held = true;
            }
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
        if held && let Some(delay) = &delay {
            delay.delivered.store(true, Ordering::SeqCst);
        }
    }
}
