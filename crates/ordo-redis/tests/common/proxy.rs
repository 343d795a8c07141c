//! A TCP proxy in front of a real Redis that fails the way networks do:
//! it can lose one reply (and drop that connection), or partition the
//! client from Redis (connections stay open and nothing gets through, so
//! commands time out) until healed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The proxy; it runs until the test's runtime ends.
pub struct Proxy {
    port: u16,
    lose_reply: Arc<AtomicBool>,
    open: watch::Sender<bool>,
}

impl Proxy {
    /// A proxy to the Redis on `redis_port` (loopback).
    pub async fn start(redis_port: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let lose_reply = Arc::new(AtomicBool::new(false));
        let (open, _) = watch::channel(true);
        let (lose, opened) = (lose_reply.clone(), open.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", redis_port)).await else {
                    continue;
                };
                tokio::spawn(relay(client, server, lose.clone(), opened.subscribe()));
            }
        });
        Ok(Self {
            port,
            lose_reply,
            open,
        })
    }

    /// The URL clients connect to.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
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
async fn relay(client: TcpStream, server: TcpStream, lose: Arc<AtomicBool>, open: watch::Receiver<bool>) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let no_loss = Arc::new(AtomicBool::new(false));
    tokio::select! {
        () = pipe(client_read, server_write, no_loss, open.clone()) => {}
        () = pipe(server_read, client_write, lose, open) => {}
    }
}

/// Copies `from` to `to` while the network is open. Returns (dropping both)
/// when `from` closes, when a chunk is to be lost, or when a partition that
/// held this connection ends.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    lose: Arc<AtomicBool>,
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
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
