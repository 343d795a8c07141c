//! The keyed executor's guarantees: per-id mutual exclusion and order,
//! parallelism across ids, the concurrency bound, panic isolation and `idle()`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ordo_core::contract::policy::SequenceId;
use ordo_core::runtime::executor::KeyedExecutor;
use tokio::sync::{Barrier, Notify};
use tokio::time::timeout;

/// How long anything that should happen may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(10);

fn id(text: &str) -> Option<SequenceId> {
    Some(SequenceId::from(text))
}

/// Waits for the executor to go idle, failing the test after [`DEADLINE`].
async fn settle(executor: &KeyedExecutor) {
    timeout(DEADLINE, executor.idle())
        .await
        .expect("executor did not become idle in time");
}

/// Counts how many tasks run at once and remembers the maximum.
#[derive(Default)]
struct ConcurrencyGauge {
    current: AtomicUsize,
    max: AtomicUsize,
}

impl ConcurrencyGauge {
    fn enter(&self) {
        let now = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.current.fetch_sub(1, Ordering::SeqCst);
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_id_tasks_never_overlap_and_run_in_submission_order() {
    const IDS: usize = 4;
    const PER_ID: usize = 40;
    let executor = KeyedExecutor::new(16);
    let busy: Arc<Vec<AtomicBool>> = Arc::new((0..IDS).map(|_| AtomicBool::new(false)).collect());
    let overlaps = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<HashMap<usize, Vec<usize>>>> = Arc::default();

    // Interleave the ids so every id has a long queue while the others run.
    for seq in 0..PER_ID {
        for key in 0..IDS {
            let (busy, overlaps, seen) = (busy.clone(), overlaps.clone(), seen.clone());
            executor.submit(id(&format!("key-{key}")), async move {
                if busy[key].swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                seen.lock().unwrap().entry(key).or_default().push(seq);
                if seq % 3 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                } else {
                    tokio::task::yield_now().await;
                }
                busy[key].store(false, Ordering::SeqCst);
            });
        }
    }
    settle(&executor).await;

    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two tasks of one id ran at the same time"
    );
    let seen = seen.lock().unwrap();
    let expected: Vec<usize> = (0..PER_ID).collect();
    for key in 0..IDS {
        assert_eq!(seen[&key], expected, "order of key-{key}");
    }
    assert_eq!(executor.active_sequences(), 0, "idle ids must not linger");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_ids_run_in_parallel() {
    let executor = KeyedExecutor::new(4);
    let barrier = Arc::new(Barrier::new(2));
    let meet = |key: &str| {
        let barrier = barrier.clone();
        executor.submit(
            id(key),
            async move { timeout(DEADLINE, barrier.wait()).await.is_ok() },
        )
    };
    let (a, b) = (meet("a"), meet("b"));
    // Each task only gets past the barrier if the other runs at the same time.
    assert!(a.await.unwrap(), "task of id a never met task of id b");
    assert!(b.await.unwrap(), "task of id b never met task of id a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_without_an_id_run_in_parallel() {
    let executor = KeyedExecutor::new(4);
    let barrier = Arc::new(Barrier::new(2));
    let receivers: Vec<_> = (0..2)
        .map(|_| {
            let barrier = barrier.clone();
            executor.submit(
                None,
                async move { timeout(DEADLINE, barrier.wait()).await.is_ok() },
            )
        })
        .collect();
    for receiver in receivers {
        assert!(
            receiver.await.unwrap(),
            "unsequenced tasks did not run concurrently"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_bounded_and_the_bound_is_reached() {
    const BOUND: usize = 3;
    let executor = KeyedExecutor::new(BOUND);
    let gauge = Arc::new(ConcurrencyGauge::default());
    // Tasks meet in groups of BOUND: every group passes only if BOUND tasks run at once,
    // and a task beyond the bound would show up in the gauge.
    let barrier = Arc::new(Barrier::new(BOUND));
    let receivers: Vec<_> = (0..BOUND * 4)
        .map(|n| {
            let (gauge, barrier) = (gauge.clone(), barrier.clone());
            // Half keyed, half unkeyed: both take a permit.
            let key = (n % 2 == 0).then(|| SequenceId::from(format!("key-{n}")));
            executor.submit(key, async move {
                gauge.enter();
                let met = timeout(DEADLINE, barrier.wait()).await.is_ok();
                tokio::time::sleep(Duration::from_millis(2)).await;
                gauge.leave();
                met
            })
        })
        .collect();
    for receiver in receivers {
        assert!(
            receiver.await.unwrap(),
            "a group of {BOUND} tasks never ran together"
        );
    }
    assert_eq!(gauge.max(), BOUND, "observed concurrency");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_task_does_not_block_its_id() {
    let executor = KeyedExecutor::new(4);
    let order = Arc::new(Mutex::new(Vec::new()));
    let gate = Arc::new(Notify::new());
    let record = |n: usize| {
        let order = order.clone();
        move || order.lock().unwrap().push(n)
    };

    // Hold the id so the panicking task and its successors are queued behind it.
    let first = {
        let (gate, record) = (gate.clone(), record(0));
        executor.submit(id("k"), async move {
            gate.notified().await;
            record();
        })
    };
    let panicking = {
        let record = record(1);
        executor.submit(id("k"), async move {
            record();
            panic!("task 1 fails");
        })
    };
    let after: Vec<_> = (2..5)
        .map(|n| {
            let record = record(n);
            executor.submit(id("k"), async move {
                record();
                n
            })
        })
        .collect();
    gate.notify_one();

    timeout(DEADLINE, first).await.unwrap().unwrap();
    assert!(
        timeout(DEADLINE, panicking).await.unwrap().is_err(),
        "a panicked task's channel closes"
    );
    for (n, receiver) in (2..5).zip(after) {
        assert_eq!(timeout(DEADLINE, receiver).await.unwrap().unwrap(), n);
    }
    settle(&executor).await;
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert_eq!(executor.in_flight(), 0);
    assert_eq!(executor.active_sequences(), 0);
}

#[tokio::test]
async fn a_panicking_unsequenced_task_is_still_counted_as_finished() {
    let executor = KeyedExecutor::new(2);
    let receiver = executor.submit(None, async { panic!("boom") });
    assert!(timeout(DEADLINE, receiver).await.unwrap().is_err());
    settle(&executor).await;
    assert_eq!(executor.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_resolves_only_after_all_work_is_done() {
    const TASKS: usize = 30;
    let executor = KeyedExecutor::new(8);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    for n in 0..TASKS {
        let (gate, done) = (gate.clone(), done.clone());
        let key = (n % 3 != 0).then(|| SequenceId::from(format!("key-{}", n % 5)));
        executor.submit(key, async move {
            let _pass = gate.acquire().await.unwrap();
            done.fetch_add(1, Ordering::SeqCst);
        });
    }
    assert_eq!(
        executor.in_flight(),
        TASKS,
        "queued and running tasks are in flight"
    );

    let waiter = tokio::spawn({
        let executor = executor.clone();
        async move { executor.idle().await }
    });
    // While every task is blocked, idle() cannot have resolved.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "idle() resolved while tasks were blocked");
    assert_eq!(done.load(Ordering::SeqCst), 0);

    gate.add_permits(TASKS);
    timeout(DEADLINE, waiter)
        .await
        .expect("idle() never resolved")
        .unwrap();
    assert_eq!(
        done.load(Ordering::SeqCst),
        TASKS,
        "idle() resolved before every task finished"
    );
    assert_eq!(executor.in_flight(), 0);
    assert_eq!(executor.active_sequences(), 0);
}

#[tokio::test]
async fn idle_waits_for_tasks_submitted_by_running_tasks() {
    let executor = KeyedExecutor::new(2);
    let done = Arc::new(AtomicBool::new(false));
    let inner = executor.clone();
    let flag = done.clone();
    executor.submit(id("k"), async move {
        tokio::task::yield_now().await;
        inner.submit(id("k"), async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            flag.store(true, Ordering::SeqCst);
        });
    });
    settle(&executor).await;
    assert!(
        done.load(Ordering::SeqCst),
        "idle() resolved before the follow-up task ran"
    );
}

#[tokio::test]
async fn idle_on_a_fresh_executor_resolves_at_once() {
    let executor = KeyedExecutor::new(1);
    settle(&executor).await;
    assert_eq!(executor.in_flight(), 0);
}

#[tokio::test]
async fn tasks_run_even_when_their_receiver_is_dropped() {
    let executor = KeyedExecutor::new(1);
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..5 {
        let ran = ran.clone();
        drop(executor.submit(id("k"), async move {
            ran.fetch_add(1, Ordering::SeqCst);
        }));
    }
    settle(&executor).await;
    assert_eq!(ran.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn many_ids_leave_no_entries_behind() {
    let executor = KeyedExecutor::new(4);
    let receivers: Vec<_> = (0..2_000)
        .map(|n| executor.submit(id(&format!("key-{n}")), async move { n }))
        .collect();
    assert!(executor.active_sequences() > 0);
    settle(&executor).await;
    assert_eq!(executor.active_sequences(), 0);
    for (n, receiver) in receivers.into_iter().enumerate() {
        assert_eq!(receiver.await.unwrap(), n);
    }
}

#[tokio::test]
async fn a_zero_bound_is_raised_to_one() {
    let executor = KeyedExecutor::new(0);
    assert_eq!(executor.max_concurrency(), 1);
    let receiver = executor.submit(None, async { 7 });
    assert_eq!(timeout(DEADLINE, receiver).await.unwrap().unwrap(), 7);
}

#[tokio::test]
async fn debug_shows_the_bound_and_the_load() {
    let executor = KeyedExecutor::new(3);
    let text = format!("{executor:?}");
    assert!(
        text.contains("max_concurrency: 3") && text.contains("in_flight: 0"),
        "{text}"
    );
}
