//! Sending signals to child processes, and knowing when SIGSTOP has taken hold.

use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use crate::error::{Result, TestkitError};
use crate::wait::POLL_INTERVAL;

/// How long [`wait_stopped`] waits for SIGSTOP to take effect.
const STOP_DEADLINE: Duration = Duration::from_secs(2);

/// The pid of a child, as `kill(2)` wants it.
pub(crate) fn pid_of(child: &Child) -> i32 {
    // Linux and the BSDs cap pids far below i32::MAX.
    i32::try_from(child.id()).unwrap_or(i32::MAX)
}

/// Sends `signal` to one process.
pub(crate) fn send(pid: i32, signal: Signal) -> Result<()> {
    signal::kill(Pid::from_raw(pid), signal).map_err(|source| TestkitError::Signal { signal, pid, source })
}

/// Sends `signal` to every process of the group `pgid`.
pub(crate) fn send_group(pgid: i32, signal: Signal) -> Result<()> {
    signal::killpg(Pid::from_raw(pgid), signal).map_err(|source| TestkitError::Signal {
        signal,
        pid: pgid,
        source,
    })
}

/// Waits until `pid` can no longer run user code, so that when `pause()`
/// returns the process takes no further step (SIGSTOP is delivered asynchronously).
///
/// That is state 'T' (stopped), or 'D' (blocked in the kernel): a blocked
/// process stops as soon as its system call returns, and may never leave 'D'
/// while paused (a shell whose `vfork`ed child was stopped before `exec` waits
/// there until SIGCONT).
///
/// Reads `/proc/<pid>/stat`; on systems without procfs this returns at once.
pub(crate) fn wait_stopped(pid: i32) -> Result<()> {
    let started = Instant::now();
    loop {
        match process_state(pid) {
            None | Some('T' | 't' | 'D') => return Ok(()),
            Some(state) if started.elapsed() >= STOP_DEADLINE => {
                return Err(TestkitError::NotStopped {
                    pid,
                    waited: started.elapsed(),
                    state,
                });
            }
            Some(_) => std::thread::sleep(POLL_INTERVAL),
        }
    }
}

/// The state letter of `/proc/<pid>/stat` ('R', 'S', 'T', 'Z'...), `None` without procfs.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": comm may itself contain ") ", so split at the last one.
    let (_, after_comm) = stat.rsplit_once(") ")?;
    after_comm.chars().next()
}
