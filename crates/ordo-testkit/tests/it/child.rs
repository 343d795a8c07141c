//! `Process` against real children: the signals must have the effect a
//! multi-process test relies on, and output must be read in order.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

use ordo_testkit::{Process, TestkitError, wait_until};

const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;
const DEADLINE: Duration = Duration::from_secs(10);

fn shell(script: &str) -> Process {
    let mut command = Command::new("sh");
    command.arg("-c").arg(script);
    Process::spawn(command).unwrap()
}

fn sleep_30() -> Process {
    let mut command = Command::new("sleep");
    command.arg("30");
    Process::spawn(command).unwrap()
}

/// The state letter from `/proc/<pid>/stat`, `None` once the process is gone.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn tick_number(line: &str) -> u64 {
    line.strip_prefix("tick ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a tick: {line:?}"))
}

#[test]
fn lines_are_consumed_in_order() {
    let mut child = shell("printf 'alpha\\nbeta\\nalpha again\\n'; sleep 30");
    assert_eq!(
        child
            .wait_for_line(|line| line.starts_with("alpha"), DEADLINE)
            .unwrap(),
        "alpha"
    );
    assert_eq!(
        child.wait_for_line(|line| line == "beta", DEADLINE).unwrap(),
        "beta"
    );
    assert_eq!(
        child
            .wait_for_line(|line| line.starts_with("alpha"), DEADLINE)
            .unwrap(),
        "alpha again"
    );
    assert_eq!(child.lines(), ["alpha", "beta", "alpha again"]);

    let started = Instant::now();
    let error = child
        .wait_for_line(|line| line == "gamma", Duration::from_millis(100))
        .unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(100));
    let TestkitError::LineNotSeen {
        reason, last_lines, ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(reason, "within 100ms");
    assert_eq!(last_lines, "alpha\nbeta\nalpha again");
}

#[test]
fn a_failed_wait_does_not_consume_lines() {
    let mut child = shell("echo first; echo second; sleep 30");
    child.wait_for_line(|line| line == "second", DEADLINE).unwrap();
    assert!(
        child
            .wait_for_line(|line| line == "first", Duration::from_millis(50))
            .is_err()
    );
    let mut child = shell("echo first; echo second; sleep 30");
    wait_until(DEADLINE, "two lines", || child.lines().len() == 2).unwrap();
    assert!(
        child
            .wait_for_line(|line| line == "third", Duration::from_millis(50))
            .is_err()
    );
    assert_eq!(
        child.wait_for_line(|line| line == "first", DEADLINE).unwrap(),
        "first"
    );
}

#[test]
fn wait_for_line_fails_early_when_the_child_exits() {
    let mut child = shell("echo one; echo two; exit 3");
    let started = Instant::now();
    let error = child.wait_for_line(|line| line == "three", DEADLINE).unwrap_err();
    assert!(started.elapsed() < DEADLINE / 2, "waited {:?}", started.elapsed());
    let message = error.to_string();
    assert!(
        message.contains("printed no matching line before closing its stdout (exit status: 3)"),
        "{message}"
    );
    assert!(message.ends_with("one\ntwo"), "{message}");
}

#[test]
fn pause_stops_the_whole_group_until_resume() {
    let mut child = shell("i=0; while true; do i=$((i+1)); echo \"tick $i\"; sleep 0.02; done");
    child.wait_for_line(|line| line == "tick 3", DEADLINE).unwrap();
    child.pause().unwrap();
    // 'D': a shell waiting for a vfork()ed child that was stopped before exec
    // (it may pass through 'R' on its way to 'T' as its system call returns).
    ordo_testkit::wait_until(DEADLINE, "the child stopped", || {
        matches!(state(child.pid()), Some('T' | 'D'))
    })
    .unwrap_or_else(|error| panic!("{error}: {:?}", state(child.pid())));
    // Absence of progress can only be observed over a window: let the reader
    // drain what was written before the stop, then watch for anything new.
    std::thread::sleep(Duration::from_millis(100));
    let frozen = child.lines();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(child.lines(), frozen, "output continued while paused");

    child.resume().unwrap();
    let last = tick_number(frozen.last().unwrap());
    let next = child
        .wait_for_line(|line| tick_number(line) > last, DEADLINE)
        .unwrap();
    assert_eq!(tick_number(&next), last + 1);
}

#[test]
fn terminate_ends_it_with_sigterm() {
    let mut child = sleep_30();
    assert_eq!(child.wait_timeout(Duration::from_millis(50)).unwrap(), None);
    child.terminate().unwrap();
    let status = child
        .wait_timeout(DEADLINE)
        .unwrap()
        .expect("sleep ignored SIGTERM");
    assert_eq!(status.signal(), Some(SIGTERM));
}

#[test]
fn kill_reaps_it_and_later_signals_are_refused() {
    let mut child = sleep_30();
    let pid = child.pid();
    child.kill().unwrap();
    assert_eq!(state(pid), None, "the child was not reaped");
    let status = child
        .wait_timeout(Duration::ZERO)
        .unwrap()
        .expect("an exit status");
    assert_eq!(status.signal(), Some(SIGKILL));
    child.kill().unwrap();
    let error = child.pause().unwrap_err();
    assert!(
        matches!(error, TestkitError::ProcessExited { action: "pause", .. }),
        "{error:?}"
    );
}

#[test]
fn dropping_kills_what_the_child_started() {
    let mut child = shell("sleep 30 & echo $!; wait");
    let grandchild: u32 = child.wait_for_line(|_| true, DEADLINE).unwrap().parse().unwrap();
    assert!(state(grandchild).is_some());
    drop(child);
    // The orphan is reaped by init (or becomes a zombie if init does not reap).
    wait_until(DEADLINE, "the grandchild to die", || {
        matches!(state(grandchild), None | Some('Z'))
    })
    .unwrap();
}

#[test]
fn a_missing_program_is_named_in_the_error() {
    let error = Process::spawn(Command::new("/nonexistent/worker")).unwrap_err();
    assert_eq!(error.to_string(), "could not start `/nonexistent/worker`");
}

/// A child's last lines can arrive after its exit (here a grandchild prints
/// after the child exited; the reader thread can lag the same way): `lines()`
/// right after the exit misses them, `all_lines` waits for the pipe to close.
#[test]
fn all_lines_waits_for_the_output_after_the_exit() {
    let mut child = shell("(sleep 0.3; echo late) & echo early");
    let status = child.wait_timeout(DEADLINE).unwrap().expect("sh exits at once");
    assert!(status.success());
    assert!(
        !child.lines().contains(&"late".to_owned()),
        "the grandchild printed before the exit was seen"
    );
    assert_eq!(child.all_lines(DEADLINE).unwrap(), ["early", "late"]);
}

/// A pipe held open past the deadline (by a grandchild) is an error.
#[test]
fn all_lines_fails_while_the_pipe_stays_open() {
    let mut child = shell("(sleep 30) & echo early");
    child.wait_timeout(DEADLINE).unwrap().expect("sh exits at once");
    let error = child.all_lines(Duration::from_millis(200)).unwrap_err();
    assert!(error.to_string().contains("early"), "{error}");
}
