//! The opt-in testcontainers backend: Redis 7.2 in Docker.

use std::future::Future;
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, GenericImage, ImageExt, TestcontainersError};

use crate::error::{Result, TestkitError};
use crate::local::free_port;
use crate::resp::Endpoint;

/// Redis 7.2: the test-container module's default Redis 5 image lacks XAUTOCLAIM.
const IMAGE: &str = "redis";
const TAG: &str = "7.2";
const REDIS_PORT: u16 = 6379;
const READY_LINE: &str = "Ready to accept connections";

/// A Redis container, owned by a thread of its own.
///
/// The blocking testcontainers API runs its own tokio runtime and panics when it
/// is called or dropped inside another runtime (any `#[tokio::test]`). Keeping
/// the container on a plain thread and talking to it over channels makes this
/// backend usable from every kind of test.
#[derive(Debug)]
pub(crate) struct ContainerServer {
    endpoint: Endpoint,
    /// `None` only while dropping, so the worker sees the channel close.
    requests: Option<mpsc::Sender<Request>>,
    worker: Option<JoinHandle<()>>,
    running: bool,
    paused: bool,
}

/// What the worker thread does with its container.
#[derive(Debug, Clone, Copy)]
enum Op {
    Kill,
    Stop,
    Start,
    Pause,
    Unpause,
}

impl Op {
    fn action(self) -> &'static str {
        match self {
            Op::Kill => "kill",
            Op::Stop => "stop",
            Op::Start => "start",
            Op::Pause => "pause",
            Op::Unpause => "resume",
        }
    }
}

#[derive(Debug)]
struct Request {
    op: Op,
    reply: mpsc::Sender<Result<(), TestcontainersError>>,
}

impl ContainerServer {
    /// Creates and starts the container with `args` as its command, its Redis
    /// port published on a free host port that stays the same across restarts.
    pub(crate) fn start(args: Vec<String>) -> Result<Self> {
        let host_port = free_port()?;
        let (ready_tx, ready_rx) = mpsc::channel();
        let (requests, request_rx) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("ordo-redis-container".into())
            .spawn(move || serve(args, host_port, &ready_tx, request_rx))
            .map_err(TestkitError::io("spawn the thread that owns the Redis container"))?;
        let host = ready_rx
            .recv()
            .map_err(|_| worker_gone(Op::Start))?
            .map_err(|source| TestkitError::Container {
                action: "start",
                source,
            })?;
        Ok(ContainerServer {
            endpoint: Endpoint::new(host, host_port),
            requests: Some(requests),
            worker: Some(worker),
            running: true,
            paused: false,
        })
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// `docker stop` with no grace period: SIGKILL.
    pub(crate) fn kill(&mut self) -> Result<()> {
        self.shut_down(Op::Kill)
    }

    /// `docker stop`: SIGTERM, SIGKILL after Docker's default grace period.
    pub(crate) fn stop(&mut self) -> Result<()> {
        self.shut_down(Op::Stop)
    }

    /// `docker pause` (cgroup freezer: the same effect as SIGSTOP).
    pub(crate) fn pause(&mut self) -> Result<()> {
        self.require_running(Op::Pause)?;
        self.request(Op::Pause)?;
        self.paused = true;
        Ok(())
    }

    /// `docker unpause`.
    pub(crate) fn resume(&mut self) -> Result<()> {
        self.require_running(Op::Unpause)?;
        self.request(Op::Unpause)?;
        self.paused = false;
        Ok(())
    }

    /// Stops the container if it runs, then starts it again; the caller waits for PING.
    pub(crate) fn restart(&mut self) -> Result<()> {
        self.stop()?;
        self.request(Op::Start)?;
        self.running = true;
        Ok(())
    }

    fn shut_down(&mut self, op: Op) -> Result<()> {
        if !self.running {
            return Ok(());
        }
        if self.paused {
            self.resume()?;
        }
        self.request(op)?;
        self.running = false;
        Ok(())
    }

    fn require_running(&self, op: Op) -> Result<()> {
        if self.running {
            Ok(())
        } else {
            Err(TestkitError::NotRunning { action: op.action() })
        }
    }

    fn request(&self, op: Op) -> Result<()> {
        let (reply, reply_rx) = mpsc::channel();
        let requests = self.requests.as_ref().ok_or_else(|| worker_gone(op))?;
        requests
            .send(Request { op, reply })
            .map_err(|_| worker_gone(op))?;
        let outcome = reply_rx.recv().map_err(|_| worker_gone(op))?;
        outcome.map_err(|source| TestkitError::Container {
            action: op.action(),
            source,
        })
    }
}

impl Drop for ContainerServer {
    fn drop(&mut self) {
        // Closing the channel ends the worker, which removes the container as it drops it.
        self.requests = None;
        if let Some(worker) = self.worker.take() {
            // A panicked worker has nothing left to clean up.
            let _ = worker.join();
        }
    }
}

/// The worker thread: start the container, report its host, then obey requests
/// until the channel closes.
fn serve(
    args: Vec<String>,
    host_port: u16,
    ready: &mpsc::Sender<Result<String, TestcontainersError>>,
    requests: mpsc::Receiver<Request>,
) {
    let started = GenericImage::new(IMAGE, TAG)
        .with_exposed_port(REDIS_PORT.tcp())
        .with_wait_for(WaitFor::message_on_stdout(READY_LINE))
        .with_mapped_port(host_port, REDIS_PORT.tcp())
        .with_cmd(args)
        .start();
    let container = match started {
        Ok(container) => container,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    // url::Host displays IPv6 in brackets; Endpoint adds its own.
    let host = container
        .get_host()
        .map(|host| host.to_string().trim_matches(['[', ']']).to_owned());
    let usable = host.is_ok();
    let _ = ready.send(host);
    if usable {
        for request in requests {
            let _ = request.reply.send(perform(&container, request.op));
        }
    }
}

fn perform(container: &Container<GenericImage>, op: Op) -> Result<(), TestcontainersError> {
    match op {
        Op::Kill => container.stop_with_timeout(Some(0)),
        Op::Stop => container.stop(),
        Op::Start => container.start(),
        Op::Pause => complete_at_once(container.pause()),
        Op::Unpause => complete_at_once(container.unpause()),
    }
}

/// In testcontainers 0.25 the blocking `Container::pause`/`unpause` are declared
/// `async` but block inside, so they finish on their first poll and need no executor.
fn complete_at_once(
    future: impl Future<Output = Result<(), TestcontainersError>>,
) -> Result<(), TestcontainersError> {
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(outcome) => outcome,
        Poll::Pending => Err(TestcontainersError::other(
            "this testcontainers version's pause/unpause did not complete synchronously",
        )),
    }
}

fn worker_gone(op: Op) -> TestkitError {
    TestkitError::Container {
        action: op.action(),
        source: TestcontainersError::other("the thread that owned the container has stopped"),
    }
}
