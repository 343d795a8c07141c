//! What the conformance tests share: a real Redis, one tokio runtime, and
//! the runner of their random histories.

use std::sync::OnceLock;

use ordo_testkit::Redis;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};

/// The Redis of one test, shared by its cases (each case uses its own
/// category); stopped when the test ends (a server in a static would
/// outlive the test process).
pub(crate) fn redis() -> Redis {
    Redis::start().expect("the conformance test needs redis-server (see ordo-testkit)")
}

/// The runtime every case's history runs on.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// A runner of `cases` random histories that shrinks a failure and keeps
/// nothing between runs.
pub(crate) fn runner(cases: u32) -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases,
        max_shrink_iters: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}
