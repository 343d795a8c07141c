//! The examples that run to completion on their own, run as users run them:
//! `commands_across_instances` must exit 0 within its deadline, with every
//! account's deposits run in order and the resend run once.
//! (`cargo test` builds the examples before the tests.)

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Example `name`'s binary, built beside this test's.
fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe().expect("the test's own path");
    let profile = deps
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile.join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is missing: `cargo test -p ordo-redis` builds it (or `cargo build -p ordo-redis --example {name}`)",
        path.display()
    );
    path
}

/// Runs example `name` against `redis_url`; its stdout, once it exited 0
/// within `deadline` (it is killed past it).
fn run(name: &str, redis_url: &str, deadline: Duration) -> String {
    let mut child = Command::new(example(name))
        .env("REDIS_URL", redis_url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the example's status") {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{name} failed ({status}):\n{stdout}\n{stderr}");
    stdout
}

#[test]
fn commands_across_instances_runs_each_keys_commands_in_order_and_a_resend_once() {
    let redis = ordo_testkit::Redis::start().expect("a Redis for the example");
    let output = run("commands_across_instances", &redis.url(), Duration::from_secs(60));
    let accounts: Vec<&str> = output.lines().filter(|line| line.starts_with("acc-")).collect();
    assert_eq!(accounts.len(), 3, "one line per account:\n{output}");
    for line in accounts {
        let numbers: Vec<usize> = ["#0 ", "#1 ", "#2 ", "#3 "]
            .iter()
            .map(|number| {
                line.find(number)
                    .unwrap_or_else(|| panic!("{number} missing: {line}"))
            })
            .collect();
        assert!(numbers.is_sorted(), "deposits out of order: {line}");
    }
    assert!(output.contains("runs: 1"), "the resend ran again:\n{output}");
    assert!(output.ends_with("done\n"), "{output}");
}
