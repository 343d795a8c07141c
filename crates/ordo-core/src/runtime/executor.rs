//! The keyed executor: per-sequence ordering with bounded concurrency, in process.
//!
//! The inline broker and the command bus hand every message to a
//! [`KeyedExecutor`] with the sequence identifier its policy gave it.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::{Future, poll_fn};
use std::panic::{self, AssertUnwindSafe};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};

use crate::contract::policy::SequenceId;

/// A submitted task with its result channel, type-erased.
struct Job {
    task: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Whether the executor holds a permit while the task runs; `false` for
    /// nested tasks (their caller's permit is waiting for them) and for
    /// tasks that take their own permits.
    permit: bool,
}

/// How a submitted task is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    /// Under one of the executor's permits, for its whole run.
    Permit,
    /// Without a permit.
    Unbounded,
}

/// Runs tasks one after another per sequence identifier, and concurrently
/// across identifiers, with a bound on the total number running.
///
/// Guarantees:
/// - Tasks submitted with the same `Some(id)` run one at a time, in
///   submission order: a task starts only after the previous task of its id
///   has finished (completed or panicked).
/// - Tasks with different ids, or with `None`, run concurrently, at most
///   `max_concurrency` at a time in total. Waiting for a permit is FIFO.
/// - A panicking task does not wedge its id: the panic is caught and logged,
///   its receiver sees a closed channel, and the next task of the id runs.
/// - Memory is proportional to the queued work, not to the number of ids
///   ever seen: an id's entry is removed as soon as its queue drains.
///
/// A task runs to completion even if its receiver is dropped. Cloning is
/// cheap and clones share the same queues and bound.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use ordo_core::runtime::executor::KeyedExecutor;
/// use ordo_core::contract::policy::SequenceId;
///
/// let executor = KeyedExecutor::new(8);
/// let first = executor.submit(Some(SequenceId::from("order-1")), async { 1 });
/// let second = executor.submit(Some(SequenceId::from("order-1")), async { 2 });
/// executor.idle().await;
/// assert_eq!((first.await.unwrap(), second.await.unwrap()), (1, 2));
/// # }
/// ```
#[derive(Clone)]
pub struct KeyedExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    /// Bounds how many tasks run at once, across all ids.
    permits: Arc<Semaphore>,
    max_concurrency: usize,
    /// Ids with a worker, and the tasks queued behind the running one.
    queues: Mutex<HashMap<SequenceId, VecDeque<Job>>>,
    /// Tasks submitted and not yet finished.
    unfinished: AtomicUsize,
    /// Woken when `unfinished` drops to zero.
    idle: Notify,
}

impl KeyedExecutor {
    /// An executor running at most `max_concurrency` tasks at once.
    ///
    /// A bound of 0 is raised to 1 (nothing could ever run otherwise), and a
    /// bound above [`Semaphore::MAX_PERMITS`] is lowered to it.
    pub fn new(max_concurrency: usize) -> Self {
        let max_concurrency = max_concurrency.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            inner: Arc::new(Inner {
                permits: Arc::new(Semaphore::new(max_concurrency)),
                max_concurrency,
                queues: Mutex::new(HashMap::new()),
                unfinished: AtomicUsize::new(0),
                idle: Notify::new(),
            }),
        }
    }

    /// Runs `task` after every earlier task submitted with the same id; tasks
    /// with other ids (or `None`) run concurrently up to the bound.
    /// Submission order per id is execution order.
    ///
    /// The receiver yields the task's output, or an error if the task
    /// panicked.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime (it spawns a task).
    pub fn submit<F>(&self, id: Option<SequenceId>, task: F) -> oneshot::Receiver<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.submit_bounded(id, task, Bound::Permit)
    }

    /// Like [`KeyedExecutor::submit`], but the task runs without a permit
    /// once its turn in its sequence comes.
    ///
    /// For work submitted by a task that holds a permit and awaits the result
    /// (a command dispatched from a command handler): waiting for a second
    /// permit could deadlock once every permit is held by such a caller,
    /// while the caller's own permit stays taken meanwhile, so the bound
    /// still holds for independent work.
    pub fn submit_nested<F>(&self, id: Option<SequenceId>, task: F) -> oneshot::Receiver<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.submit_bounded(id, task, Bound::Unbounded)
    }

    /// Like [`KeyedExecutor::submit`], but the task takes permits itself,
    /// through the [`Permits`] it receives, only for the parts that count
    /// against the bound. Its sequence still waits for it as a whole.
    ///
    /// For tasks that wait between attempts (a retry backoff): a waiting
    /// task keeps its place in its sequence without holding a slot that other
    /// sequences could use.
    pub fn submit_with_permits<T, F>(&self, id: Option<SequenceId>, task: T) -> oneshot::Receiver<F::Output>
    where
        T: FnOnce(Permits) -> F,
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let permits = Permits {
            semaphore: Arc::clone(&self.inner.permits),
        };
        self.submit_bounded(id, task(permits), Bound::Unbounded)
    }

    fn submit_bounded<F>(&self, id: Option<SequenceId>, task: F, bound: Bound) -> oneshot::Receiver<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (sender, receiver) = oneshot::channel();
        let job = Job {
            task: Box::pin(async move {
                // The submitter may have stopped waiting; the task still ran.
                let _ = sender.send(task.await);
            }),
            permit: bound == Bound::Permit,
        };
        self.inner.unfinished.fetch_add(1, Ordering::SeqCst);
        match id {
            None => {
                let inner = Arc::clone(&self.inner);
                tokio::spawn(async move {
                    inner.run(job, None).await;
                    inner.finished_one();
                });
            }
            Some(id) => self.submit_sequenced(id, job),
        }
        receiver
    }

    /// Queues `job` behind the running task of `id`, or starts a worker for
    /// `id` when it has none.
    fn submit_sequenced(&self, id: SequenceId, job: Job) {
        {
            let mut queues = self.inner.queues();
            if let Some(queue) = queues.get_mut(&id) {
                queue.push_back(job);
                return;
            }
            queues.insert(id.clone(), VecDeque::new());
        }
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move { inner.drain(id, job).await });
    }

    /// Resolves once no task is queued or running.
    ///
    /// Tasks submitted while waiting are waited for too.
    pub async fn idle(&self) {
        loop {
            let mut notified = pin!(self.inner.idle.notified());
            // Register before checking, so a drop to zero in between still wakes us.
            notified.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// How many submitted tasks have not finished yet (queued or running).
    pub fn in_flight(&self) -> usize {
        self.inner.unfinished.load(Ordering::SeqCst)
    }

    /// How many sequence ids currently have queued or running tasks.
    pub fn active_sequences(&self) -> usize {
        self.inner.queues().len()
    }

    /// The concurrency bound in force.
    pub fn max_concurrency(&self) -> usize {
        self.inner.max_concurrency
    }
}

impl Inner {
    fn queues(&self) -> MutexGuard<'_, HashMap<SequenceId, VecDeque<Job>>> {
        // No code panics while holding the lock, so a poisoned map is still consistent.
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The worker of `id`: runs `job`, then the id's queue in FIFO order, and
    /// removes the id once its queue is empty.
    async fn drain(&self, id: SequenceId, mut job: Job) {
        loop {
            self.run(job, Some(&id)).await;
            let next = {
                let mut queues = self.queues();
                let next = queues.get_mut(&id).and_then(VecDeque::pop_front);
                if next.is_none() {
                    queues.remove(&id);
                }
                next
            };
            // Counted only now, so that once `idle()` resolves every id is gone.
            self.finished_one();
            match next {
                Some(queued) => job = queued,
                None => return,
            }
        }
    }

    /// Runs one job, under a concurrency permit unless it is unbounded,
    /// catching a panic.
    async fn run(&self, job: Job, id: Option<&SequenceId>) {
        // The semaphore is never closed, so acquiring cannot fail.
        let _permit = if job.permit {
            self.permits.acquire().await.ok()
        } else {
            None
        };
        let mut task = job.task;
        let outcome = poll_fn(
            |cx| match panic::catch_unwind(AssertUnwindSafe(|| task.as_mut().poll(cx))) {
                Ok(poll) => poll.map(Ok),
                Err(payload) => Poll::Ready(Err(payload)),
            },
        )
        .await;
        if let Err(payload) = outcome {
            tracing::error!(
                sequence = id.map(SequenceId::as_str),
                panic = panic_message(&*payload),
                "a task panicked; its sequence continues with the next task"
            );
        }
    }

    fn finished_one(&self) {
        if self.unfinished.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }
}

/// The executor's concurrency permits, for a task submitted with
/// [`KeyedExecutor::submit_with_permits`].
#[derive(Debug, Clone)]
pub struct Permits {
    semaphore: Arc<Semaphore>,
}

impl Permits {
    /// Waits for one of the executor's permits (FIFO); the slot is free
    /// again when the permit is dropped.
    pub async fn acquire(&self) -> OwnedSemaphorePermit {
        // The semaphore is never closed.
        Arc::clone(&self.semaphore)
            .acquire_owned()
            .await
            .expect("the executor's semaphore is never closed")
    }
}

/// The text of a panic payload, when it has one.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("<non-string panic payload>")
}

impl fmt::Debug for KeyedExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedExecutor")
            .field("max_concurrency", &self.inner.max_concurrency)
            .field("in_flight", &self.in_flight())
            .field("active_sequences", &self.active_sequences())
            .finish()
    }
}
