//! One handler attempt, run the same way by every broker.
//!
//! The inline broker, the Redis partition worker and the Redis plain
//! consumer each deliver a message by running its handler, possibly several
//! times. [`Attempt::run`] is that one run:
//!
//! - a panic is a failed attempt ([`Failure::panicked`], with the panic's
//!   message), never the end of the delivery loop;
//! - the handler starts on the caller's task and moves to a task of its
//!   own at its first `.await` that waits, so a run that never waits costs
//!   no task, and a waiting run can be aborted;
//! - a failure's text is [`error_chain`] (the error and its sources);
//! - a concurrency permit (any guard) is moved into the run and dropped as
//!   soon as the handler returns, so it is never held across the backoff;
//! - cancellation aborts the run and reports whether it really ended: an
//!   abort takes effect at the handler's next `.await`, so a handler in
//!   blocking code goes on, and its broker must not let another run of the
//!   same key start meanwhile; [`Cancelled::into_still_running`] hands it
//!   the run, to learn when it has ended ([`StillRunning::has_ended`]). A
//!   run blocking before its first wait is still on the caller's task:
//!   nothing notices the cancellation until it returns, and the attempt
//!   ends with it;
//! - a run longer than its timeout ([`Attempt::with_timeout`]) is aborted
//!   and is a failed attempt ([`Failure::timed_out`]); the attempt ends
//!   only once the run has (a run in blocking code ignores the abort until
//!   it returns), so its key is never run twice at once.
//!
//! What follows a failure (count it or not, wait, give up) is
//! [`crate::contract::retry`]'s decision. [`backoff`] is the wait between attempts:
//! cancellable, and holding nothing.
//!
//! ```
//! # async fn deliver(handler: std::sync::Arc<dyn ordo_core::DynHandler>, envelope: ordo_core::Envelope) {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use ordo_core::contract::attempt::{self, Attempt, Outcome};
//! use ordo_core::contract::backoff::Backoff;
//! use ordo_core::contract::handler::HandlerContext;
//! use tokio_util::sync::CancellationToken;
//!
//! let backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1)).unwrap();
//! let cancel = CancellationToken::new();
//! let envelope = Arc::new(envelope);
//! for number in 1..=3 {
//!     let ctx = HandlerContext::new(&envelope).with_attempt(number);
//!     let run = Attempt::new(handler.clone(), envelope.clone(), ctx);
//!     match run.run((), &cancel, Duration::from_millis(100)).await {
//!         Outcome::Succeeded => return,
//!         Outcome::Failed(failure) => eprintln!("attempt {number}: {}", failure.text()),
//!         _ => return, // cancelled
//!     }
//!     if !attempt::backoff(&backoff, number, &cancel).await {
//!         return;
//!     }
//! }
//! # }
//! ```

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::contract::backoff::Backoff;
use crate::contract::context::{self, Running};
use crate::contract::error::error_chain;
use crate::contract::handler::DynHandler;
use crate::contract::handler::{BoxFuture, HandlerContext, HandlerError, HandlerResult};
use crate::contract::message::Envelope;
use crate::contract::trace;

/// One run of a handler on a message.
pub struct Attempt {
    handler: Arc<dyn DynHandler>,
    envelope: Arc<Envelope>,
    ctx: HandlerContext,
    /// The handler's name, recorded for the run's task (see `in_handler`).
    name: Option<&'static str>,
    /// How long the run may take (see `with_timeout`).
    timeout: Option<Duration>,
}

impl std::fmt::Debug for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attempt")
            .field("message_id", &self.envelope.id)
            .field("attempt", &self.ctx.attempt())
            .finish_non_exhaustive()
    }
}

/// What one attempt came to.
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// The handler returned `Ok`.
    Succeeded,
    /// The handler returned an error or panicked.
    Failed(Failure),
    /// The run was cancelled before it finished.
    Cancelled(Cancelled),
}

/// A failed attempt.
#[derive(Debug)]
pub struct Failure {
    error: HandlerError,
    panicked: bool,
    timed_out: bool,
}

impl Failure {
    /// A failure with `error` (the handler returned it).
    pub fn new(error: HandlerError) -> Self {
        Self {
            error,
            panicked: false,
            timed_out: false,
        }
    }

    /// The handler's error (for a panic: an error carrying its message).
    pub fn error(&self) -> &HandlerError {
        &self.error
    }

    /// The error and its sources, as one line: what failure records and
    /// logs show.
    pub fn text(&self) -> String {
        error_chain(&*self.error)
    }

    /// A run cancelled after `timeout`.
    pub(crate) fn timed_out_after(timeout: Duration) -> Self {
        Self {
            error: Box::new(TimedOut { timeout }),
            panicked: false,
            timed_out: true,
        }
    }

    /// Whether the handler panicked.
    pub fn panicked(&self) -> bool {
        self.panicked
    }

    /// Whether the run was cancelled for taking longer than its timeout
    /// (the error is then a [`TimedOut`]).
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// The handler's error.
    pub fn into_error(self) -> HandlerError {
        self.error
    }
}

/// A cancelled attempt.
#[derive(Debug)]
pub struct Cancelled {
    /// The aborted run, when it did not end within the grace.
    running: Option<StillRunning>,
}

impl Cancelled {
    /// Whether the aborted run ended within the grace it was given. When it
    /// did not (the handler is in blocking code, which an abort cannot
    /// interrupt), it may still be running: whatever guarantees the key's
    /// exclusivity (a lease) must be kept for as long as it runs
    /// ([`Cancelled::into_still_running`]).
    pub fn ended(&self) -> bool {
        self.running.is_none()
    }

    /// The aborted run, when it did not end within the grace: a broker
    /// keeps the key's exclusivity until [`StillRunning::has_ended`].
    pub fn into_still_running(self) -> Option<StillRunning> {
        self.running
    }
}

/// An aborted handler run that had not ended within its grace: it is in
/// blocking code (a loop, a call without a timeout), which an abort cannot
/// interrupt, and ends when that code returns to an `.await` (or with the
/// process).
#[derive(Debug)]
pub struct StillRunning {
    task: JoinHandle<HandlerResult>,
}

impl StillRunning {
    /// Whether the run has ended by now (its task is gone).
    pub fn has_ended(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits until the run has ended (from any runtime or thread).
    pub async fn ended(self) {
        // An aborted task ends with a cancellation error; either way it ran out.
        let _ = self.task.await;
    }
}

/// A handler that panicked, as a failed attempt's error.
#[derive(Debug, thiserror::Error)]
#[error("the handler panicked: {message}")]
pub struct Panicked {
    message: String,
}

/// A run cancelled for taking longer than its timeout, as a failed
/// attempt's error.
#[derive(Debug, thiserror::Error)]
#[error("the handler did not finish within its timeout of {} ms and was cancelled", .timeout.as_millis())]
pub struct TimedOut {
    timeout: Duration,
}

impl TimedOut {
    /// The timeout it ran past.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl Panicked {
    /// The panic's message (`<non-text panic payload>` when it had none).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl Attempt {
    /// A run of `handler` on `envelope` with `ctx`.
    pub fn new(handler: Arc<dyn DynHandler>, envelope: Arc<Envelope>, ctx: HandlerContext) -> Self {
        Self {
            handler,
            envelope,
            ctx,
            name: None,
            timeout: None,
        }
    }

    /// Cancels the run once it has taken `timeout` (`None`: never); it is
    /// then a failed attempt ([`Failure::timed_out`]). The abort takes
    /// effect at the handler's next `.await`: [`Attempt::run`] returns only
    /// once the run has ended (or once `cancel` fires while it goes on).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout.filter(|t| !t.is_zero());
        self
    }

    /// Records that the run is handler `name`'s, so that calls which would
    /// wait for the running handler itself (`Domain::settle()`, a nested
    /// dispatch of a held sequence) are refused from inside it.
    #[must_use]
    pub fn in_handler(mut self, name: &'static str) -> Self {
        self.name = Some(name);
        self
    }

    /// Runs the handler once (in the current tracing span).
    ///
    /// The run starts on the caller's task: a handler that finishes without
    /// waiting for anything (most do: a projection, a state change, a
    /// command that only records) costs no task of its own. At its first
    /// `.await` that does not complete at once it moves to a task of its
    /// own, so a kill or a timeout can abort it while it waits.
    ///
    /// `permit` is held by the run and dropped as soon as the handler
    /// returns (pass a semaphore permit to bound concurrent runs, or `()`).
    /// When `cancel` fires first, the run is aborted and given up to
    /// `abort_grace` to end; [`Cancelled::ended`] says whether it did. A
    /// run cancelled before it starts does not start.
    pub async fn run<P>(self, permit: P, cancel: &CancellationToken, abort_grace: Duration) -> Outcome
    where
        P: Send + 'static,
    {
        let Self {
            handler,
            envelope,
            ctx,
            name,
            timeout,
        } = self;
        if cancel.is_cancelled() {
            return Outcome::Cancelled(Cancelled { running: None });
        }
        let started = tokio::time::Instant::now();
        let handled = Arc::clone(&envelope);
        let run = context::handling(handled, async move {
            let result = handler.handle(&envelope, &ctx).await;
            drop(permit);
            result
        });
        let run: BoxFuture<'static, HandlerResult> = match name {
            Some(name) => Box::pin(context::scope(Running::handler(name), run)),
            None => Box::pin(run),
        };
        let mut run = trace::carried(run);
        let first = std::future::poll_fn(|cx| Poll::Ready(poll_caught(run.as_mut(), cx))).await;
        match first {
            Ok(Poll::Ready(result)) => return outcome(Ok(result)),
            Err(panic) => return outcome(Err(panic)),
            Ok(Poll::Pending) => {}
        }
        let mut task = tokio::spawn(run.instrument(tracing::Span::current()));
        let expired = async {
            match timeout {
                Some(timeout) => tokio::time::sleep_until(started + timeout).await,
                None => std::future::pending().await,
            }
        };
        let joined = tokio::select! {
            joined = &mut task => joined,
            () = cancel.cancelled() => return abort(task, abort_grace).await,
            () = expired => {
                task.abort();
                // The key stays this run's until it ends: a run in blocking
                // code ends only when it returns.
                let joined = tokio::select! {
                    joined = &mut task => joined,
                    () = cancel.cancelled() => return abort(task, abort_grace).await,
                };
                match joined {
                    Err(join) if join.is_cancelled() => {
                        return Outcome::Failed(Failure::timed_out_after(timeout.unwrap_or_default()));
                    }
                    // It ended on its own before the abort took effect.
                    joined => joined,
                }
            }
        };
        match joined {
            Ok(result) => outcome(Ok(result)),
            Err(join) if join.is_panic() => outcome(Err(join.into_panic())),
            // Only an abort cancels the task, and the abort is ours.
            Err(_) => Outcome::Cancelled(Cancelled { running: None }),
        }
    }
}

/// What a run that ended came to: what the handler returned, or its panic.
fn outcome(ended: Result<HandlerResult, Box<dyn Any + Send>>) -> Outcome {
    match ended {
        Ok(Ok(())) => Outcome::Succeeded,
        Ok(Err(error)) => Outcome::Failed(Failure::new(error)),
        Err(panic) => {
            let message = panic_message(&*panic).to_owned();
            Outcome::Failed(Failure {
                error: Box::new(Panicked { message }),
                panicked: true,
                timed_out: false,
            })
        }
    }
}

/// Aborts `task` and gives it `grace` to end.
async fn abort(mut task: JoinHandle<HandlerResult>, grace: Duration) -> Outcome {
    task.abort();
    let ended = tokio::time::timeout(grace, &mut task).await.is_ok();
    let running = (!ended).then_some(StillRunning { task });
    Outcome::Cancelled(Cancelled { running })
}

/// Waits the backoff before retry number `retry` (1 for the first retry),
/// unless `cancel` fires first; returns whether the full delay elapsed. It
/// holds nothing: call it after the failed attempt's permit was released.
pub async fn backoff(backoff: &Backoff, retry: u32, cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(backoff.delay(retry)) => true,
        () = cancel.cancelled() => false,
    }
}

/// Runs `run` to its end where it is, catching a panic: its payload.
pub(crate) async fn catch_panic<F: Future>(run: F) -> Result<F::Output, Box<dyn Any + Send>> {
    let mut run = std::pin::pin!(run);
    std::future::poll_fn(|cx| match poll_caught(run.as_mut(), cx) {
        Ok(Poll::Pending) => Poll::Pending,
        Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
        Err(panic) => Poll::Ready(Err(panic)),
    })
    .await
}

/// Polls `run` once, catching a panic (the future is done with then).
fn poll_caught<F: Future + ?Sized>(
    run: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Result<Poll<F::Output>, Box<dyn Any + Send>> {
    panic::catch_unwind(AssertUnwindSafe(|| run.poll(cx)))
}

/// The text of a panic payload (`panic!` with a literal or a format string).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(message) = payload.downcast_ref::<&'static str>() {
        message
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message
    } else {
        "<non-text panic payload>"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::contract::handler::{BoxFuture, HandlerResult};
    use crate::contract::message::{MessageKind, Metadata};

    fn envelope() -> Arc<Envelope> {
        Arc::new(Envelope {
            id: "m-1".to_owned(),
            kind: MessageKind::Event,
            type_name: "Happened".to_owned(),
            category: "order".to_owned(),
            aggregate_id: None,
            routing_key: None,
            partition_key: None,
            metadata: Metadata::new(),
            occurred_at: None,
            correlation_id: None,
            causation_id: None,
            payload: "{}".into(),
        })
    }

    struct Handler(fn() -> BoxFuture<'static, HandlerResult>);

    #[derive(Debug, thiserror::Error)]
    #[error("projection failed")]
    struct Projection(#[source] std::io::Error);

    impl DynHandler for Handler {
        fn handle<'a>(&'a self, _: &'a Envelope, _: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
            (self.0)()
        }
    }

    async fn run(handler: Handler, cancel: &CancellationToken) -> Outcome {
        let envelope = envelope();
        let ctx = HandlerContext::new(&envelope);
        Attempt::new(Arc::new(handler), envelope, ctx)
            .run((), cancel, Duration::from_millis(50))
            .await
    }

    #[tokio::test]
    async fn a_panic_is_a_failed_attempt_carrying_its_message() {
        let outcome = run(
            Handler(|| Box::pin(async { panic!("balance for {} went negative", "c-1") })),
            &CancellationToken::new(),
        )
        .await;
        let Outcome::Failed(failure) = outcome else {
            panic!("expected a failure, got {outcome:?}");
        };
        assert!(failure.panicked());
        assert_eq!(
            failure.text(),
            "the handler panicked: balance for c-1 went negative"
        );
    }

    #[tokio::test]
    async fn a_panic_after_the_run_waited_is_a_failed_attempt_too() {
        let outcome = run(
            Handler(|| {
                Box::pin(async {
                    tokio::task::yield_now().await;
                    panic!("replica lagged")
                })
            }),
            &CancellationToken::new(),
        )
        .await;
        let Outcome::Failed(failure) = outcome else {
            panic!("expected a failure, got {outcome:?}");
        };
        assert!(failure.panicked());
        assert_eq!(failure.text(), "the handler panicked: replica lagged");
    }

    /// The task each run of the test handlers below ran on, start and end.
    static TASKS: std::sync::Mutex<Vec<Option<tokio::task::Id>>> = std::sync::Mutex::new(Vec::new());

    fn record_task() {
        TASKS.lock().unwrap().push(tokio::task::try_id());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_that_never_waits_stays_on_the_caller_s_task_and_one_that_waits_moves() {
        let caller = tokio::spawn(async {
            let caller = tokio::task::id();
            TASKS.lock().unwrap().clear();
            let done = run(
                Handler(|| {
                    Box::pin(async {
                        record_task();
                        Ok(())
                    })
                }),
                &CancellationToken::new(),
            )
            .await;
            assert!(matches!(done, Outcome::Succeeded), "{done:?}");
            let waited = run(
                Handler(|| {
                    Box::pin(async {
                        record_task();
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        record_task();
                        Ok(())
                    })
                }),
                &CancellationToken::new(),
            )
            .await;
            assert!(matches!(waited, Outcome::Succeeded), "{waited:?}");
            caller
        });
        let caller = Some(caller.await.unwrap());
        let tasks = TASKS.lock().unwrap().clone();
        assert_eq!(tasks.len(), 3, "{tasks:?}");
        assert_eq!(tasks[0], caller, "a run that never waited had a task of its own");
        assert_eq!(tasks[1], caller, "a run starts on its caller's task");
        assert!(
            tasks[2].is_some() && tasks[2] != caller,
            "a run that waited did not move to a task of its own: {tasks:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_blocking_before_it_first_waits_holds_its_caller_until_it_returns() {
        let cancel = CancellationToken::new();
        let later = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            later.cancel();
        });
        let started = std::time::Instant::now();
        let outcome = run(
            Handler(|| {
                Box::pin(async {
                    tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(300)));
                    Ok(())
                })
            }),
            &cancel,
        )
        .await;
        // Nothing could abort it: it ran to its end, and the attempt with it.
        assert!(matches!(outcome, Outcome::Succeeded), "{outcome:?}");
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn an_error_is_reported_with_its_sources() {
        let outcome = run(
            Handler(|| {
                Box::pin(async {
                    Err(Box::new(Projection(std::io::Error::other("disk full"))) as HandlerError)
                })
            }),
            &CancellationToken::new(),
        )
        .await;
        let Outcome::Failed(failure) = outcome else {
            panic!("expected a failure, got {outcome:?}");
        };
        assert!(!failure.panicked());
        assert_eq!(failure.text(), "projection failed: disk full");
    }

    #[tokio::test]
    async fn the_permit_is_released_when_the_handler_returns() {
        let semaphore = Arc::new(tokio::sync::Semaphore::new(1));
        let permit = semaphore.clone().acquire_owned().await.unwrap();
        let envelope = envelope();
        let ctx = HandlerContext::new(&envelope);
        let outcome = Attempt::new(
            Arc::new(Handler(|| Box::pin(async { Err("no".into()) }))),
            envelope,
            ctx,
        )
        .run(permit, &CancellationToken::new(), Duration::ZERO)
        .await;
        assert!(matches!(outcome, Outcome::Failed(_)));
        assert_eq!(semaphore.available_permits(), 1, "held across the backoff");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancelling_reports_whether_the_run_ended() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let outcome = run(Handler(|| Box::pin(std::future::pending())), &cancel).await;
        assert!(matches!(outcome, Outcome::Cancelled(c) if c.ended()));

        static RELEASED: AtomicBool = AtomicBool::new(false);
        let cancel = CancellationToken::new();
        let later = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            later.cancel();
        });
        let outcome = run(
            Handler(|| {
                Box::pin(async {
                    // Blocking code once the run waited, on its own task.
                    tokio::task::yield_now().await;
                    tokio::task::block_in_place(|| {
                        while !RELEASED.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    });
                    Ok(())
                })
            }),
            &cancel,
        )
        .await;
        let Outcome::Cancelled(cancelled) = outcome else {
            panic!("cancelled: {outcome:?}");
        };
        assert!(!cancelled.ended());
        let running = cancelled.into_still_running().expect("the run goes on");
        assert!(!running.has_ended(), "it ended while blocked");
        RELEASED.store(true, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(10), running.ended())
            .await
            .expect("the run ends once its blocking code returns");
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_past_its_timeout_is_cancelled_as_a_failed_attempt() {
        let envelope = envelope();
        let ctx = HandlerContext::new(&envelope);
        let started = tokio::time::Instant::now();
        let outcome = Attempt::new(
            Arc::new(Handler(|| Box::pin(std::future::pending()))),
            envelope,
            ctx,
        )
        .with_timeout(Some(Duration::from_secs(30)))
        .run((), &CancellationToken::new(), Duration::ZERO)
        .await;
        let Outcome::Failed(failure) = outcome else {
            panic!("expected a failure, got {outcome:?}");
        };
        assert!(failure.timed_out() && !failure.panicked());
        assert_eq!(
            failure.text(),
            "the handler did not finish within its timeout of 30000 ms and was cancelled"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_blocking_run_past_its_timeout_holds_the_attempt_until_it_ends() {
        static ENDED: AtomicBool = AtomicBool::new(false);
        let envelope = envelope();
        let ctx = HandlerContext::new(&envelope);
        let outcome = Attempt::new(
            Arc::new(Handler(|| {
                Box::pin(async {
                    // Blocking code ignores the abort until it returns.
                    tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(400)));
                    ENDED.store(true, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok(())
                })
            })),
            envelope,
            ctx,
        )
        .with_timeout(Some(Duration::from_millis(50)))
        .run((), &CancellationToken::new(), Duration::ZERO)
        .await;
        assert!(
            ENDED.load(Ordering::SeqCst),
            "the attempt ended before its run did"
        );
        assert!(
            matches!(&outcome, Outcome::Failed(f) if f.timed_out()),
            "{outcome:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_backoff_stops_when_cancelled() {
        let backoff = Backoff::new(Duration::from_secs(60), Duration::from_secs(60)).unwrap();
        let cancel = CancellationToken::new();
        let waiting = tokio::spawn({
            let cancel = cancel.clone();
            async move { super::backoff(&backoff, 1, &cancel).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
        assert!(!waiting.await.unwrap());
        let started = tokio::time::Instant::now();
        assert!(super::backoff(&backoff, 1, &CancellationToken::new()).await);
        assert!(started.elapsed() >= Duration::from_secs(30));
    }
}
