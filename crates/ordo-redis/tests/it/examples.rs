//! The examples that run to completion on their own, run as users run them:
//! `commands_across_instances` must exit 0 within its deadline, with every
//! account's deposits run in order and the resend run once.
//! (`cargo test` builds the examples before the tests.)

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Example `name`'s binary, built beside this test's.
fn example(name: &str) -> PathBuf {
    ordo_testkit::example_binary(name)
}

/// Runs example `name` against `redis_url`; its stdout, once it exited 0
/// within `deadline` (it is killed past it). Its stderr goes to the test's.
fn run(name: &str, redis_url: &str, deadline: Duration) -> String {
    let mut command = Command::new(example(name));
    command.env("REDIS_URL", redis_url).stdin(Stdio::null());
    let mut child = ordo_testkit::Process::spawn(command).expect("the example starts");
    let Some(status) = child.wait_timeout(deadline).expect("the example's status") else {
        let _ = child.kill();
        panic!(
            "{name} did not finish within {deadline:?}:\n{}",
            child.lines().join("\n")
        );
    };
    let stdout = child
        .all_lines(Duration::from_secs(10))
        .expect("the example's output")
        .iter()
        .map(|line| format!("{line}\n"))
        .collect::<String>();
    assert!(status.success(), "{name} failed ({status}):\n{stdout}");
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
