//! The waker: one blocking `XREAD` over every idle owned stream, on its own
//! connection, waking only the workers whose streams got new entries.
//!
//! An idle worker registers its lanes with the last ids its fenced read saw
//! and waits. The waker blocks in `XREAD BLOCK <ms> STREAMS s1..sN id1..idN`;
//! when it returns, the workers of the streams that got entries are woken
//! (and unregistered: a busy worker is not watched). A registration while the
//! read blocks interrupts it (the client sends `CLIENT UNBLOCK` when another
//! command follows a blocked one), so a newly idle stream is watched at once.
//! Because registrations carry explicit ids, an entry added between a
//! worker's read and its registration is still seen. Idle cost: one `XREAD`
//! per block timeout, whatever the number of streams.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::prelude::{ClientLike, StreamsInterface};
use fred::types::Value;
use tokio::sync::Notify;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::scripts::array;

/// A worker's identity for the waker.
pub(crate) type WatcherId = u64;

enum Command {
    Watch {
        watcher: WatcherId,
        streams: Vec<(String, String)>,
        notify: Arc<Notify>,
    },
    Unwatch {
        watcher: WatcherId,
    },
}

/// Registers idle workers with the waker.
#[derive(Debug, Clone)]
pub(crate) struct WakerHandle {
    commands: UnboundedSender<Command>,
}

impl WakerHandle {
    /// Wakes `notify` once any of `streams` has an entry after its id.
    pub(crate) fn watch(&self, watcher: WatcherId, streams: Vec<(String, String)>, notify: Arc<Notify>) {
        let _ = self.commands.send(Command::Watch {
            watcher,
            streams,
            notify,
        });
    }

    /// Stops watching for `watcher`.
    pub(crate) fn unwatch(&self, watcher: WatcherId) {
        let _ = self.commands.send(Command::Unwatch { watcher });
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Watch { watcher, streams, .. } => f
                .debug_struct("Watch")
                .field("watcher", watcher)
                .field("streams", streams)
                .finish(),
            Self::Unwatch { watcher } => f.debug_struct("Unwatch").field("watcher", watcher).finish(),
        }
    }
}

struct Watch {
    streams: Vec<(String, String)>,
    notify: Arc<Notify>,
}

/// The waker's state and loop.
pub(crate) struct Waker {
    client: Client,
    block: Duration,
    retry: Duration,
    commands: UnboundedReceiver<Command>,
    watches: HashMap<WatcherId, Watch>,
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker")
            .field("watches", &self.watches.len())
            .finish_non_exhaustive()
    }
}

impl Waker {
    /// A waker reading with `client` (a dedicated connection configured to
    /// interrupt blocked reads), blocking at most `block` per read and
    /// waiting `retry` after a failed one.
    pub(crate) fn new(client: Client, block: Duration, retry: Duration) -> (Self, WakerHandle) {
        let (commands_tx, commands) = unbounded_channel();
        let waker = Self {
            client,
            block,
            retry,
            commands,
            watches: HashMap::new(),
        };
        (
            waker,
            WakerHandle {
                commands: commands_tx,
            },
        )
    }

    /// Runs until `shutdown` is cancelled.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        loop {
            while let Ok(command) = self.commands.try_recv() {
                self.apply(command);
            }
            if self.watches.is_empty() {
                tokio::select! {
                    command = self.commands.recv() => match command {
                        Some(command) => self.apply(command),
                        None => return,
                    },
                    () = shutdown.cancelled() => return,
                }
                continue;
            }
            if !self.read_once(&shutdown).await {
                return;
            }
        }
    }

    /// One blocking read over the watched streams; returns false on shutdown.
    async fn read_once(&mut self, shutdown: &CancellationToken) -> bool {
        let (keys, ids) = self.read_arguments();
        let block_ms = u64::try_from(self.block.as_millis()).unwrap_or(u64::MAX).max(1);
        let client = self.client.clone();
        let read = client.xread::<Value, _, _>(Some(1), Some(block_ms), keys, ids);
        tokio::pin!(read);
        let mut interrupted = false;
        let result = loop {
            tokio::select! {
                result = &mut read => break result,
                command = self.commands.recv(), if !interrupted => {
                    let Some(command) = command else { return false };
                    self.apply(command);
                    // Any command on this client interrupts the blocked read;
                    // its reply (entries or an UNBLOCKED error) is still
                    // awaited above, so no wake-up is lost.
                    interrupted = true;
                    let client = client.clone();
                    tokio::spawn(async move {
                        let _: Result<(), _> = client.ping(None).await;
                    });
                }
                () = shutdown.cancelled() => return false,
            }
        };
        match result {
            Ok(value) => self.wake(value),
            // An UNBLOCKED reply is an interruption even when this read was
            // not interrupted on purpose: the PING that interrupts a read
            // can land after that read already returned, and unblock the
            // next one. The ids are explicit, so reading again loses
            // nothing; taking it for a failure would stop watching for the
            // retry delay (a poll interval added to the latency).
            Err(error) if interrupted || error.details().starts_with("UNBLOCKED") => {
                debug!(%error, "waker read interrupted to watch new streams");
            }
            Err(error) => {
                // The connection may have dropped with entries in flight:
                // wake everyone (a spurious wake costs one fenced read).
                warn!(%error, "waker read failed; waking every watcher");
                self.wake_all();
                return sleep_or_shutdown(self.retry, shutdown).await;
            }
        }
        true
    }

    fn apply(&mut self, command: Command) {
        match command {
            Command::Watch {
                watcher,
                streams,
                notify,
            } => {
                self.watches.insert(watcher, Watch { streams, notify });
            }
            Command::Unwatch { watcher } => {
                self.watches.remove(&watcher);
            }
        }
    }

    /// Each watched stream once, from the smallest id any watcher holds.
    fn read_arguments(&self) -> (Vec<String>, Vec<String>) {
        let mut from: BTreeMap<&str, &str> = BTreeMap::new();
        for watch in self.watches.values() {
            for (stream, id) in &watch.streams {
                from.entry(stream)
                    .and_modify(|current| {
                        if id_less(id, current) {
                            *current = id;
                        }
                    })
                    .or_insert(id);
            }
        }
        from.into_iter()
            .map(|(s, i)| (s.to_owned(), i.to_owned()))
            .unzip()
    }

    /// Wakes the watchers of every stream in an XREAD reply.
    fn wake(&mut self, reply: Value) {
        let streams: Vec<String> = array(reply)
            .into_iter()
            .filter_map(|entry| array(entry).into_iter().next())
            .filter_map(|name| name.as_str().map(|s| s.into_owned()))
            .collect();
        if streams.is_empty() {
            return;
        }
        self.watches.retain(|_, watch| {
            let hit = watch.streams.iter().any(|(s, _)| streams.contains(s));
            if hit {
                watch.notify.notify_one();
            }
            !hit
        });
    }

    fn wake_all(&mut self) {
        for (_, watch) in self.watches.drain() {
            watch.notify.notify_one();
        }
    }
}

async fn sleep_or_shutdown(duration: Duration, shutdown: &CancellationToken) -> bool {
    super::sleep_unless(shutdown, duration).await
}

/// Compares two stream ids (`ms-seq`); malformed ids compare as equal.
fn id_less(a: &str, b: &str) -> bool {
    fn parse(id: &str) -> Option<(u64, u64)> {
        let (ms, seq) = id.split_once('-')?;
        Some((ms.parse().ok()?, seq.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some(a), Some(b)) => a < b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::id_less;

    #[test]
    fn ids_compare_numerically() {
        assert!(id_less("9-0", "10-0"));
        assert!(id_less("10-2", "10-10"));
        assert!(!id_less("10-10", "10-2"));
        assert!(!id_less("0-0", "0-0"));
    }
}
