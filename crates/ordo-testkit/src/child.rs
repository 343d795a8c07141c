//! [`Process`]: a child process a multi-process test can signal and read.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::error::{Result, TestkitError};
use crate::signal::{self, pid_of};
use crate::wait::POLL_INTERVAL;

/// Lines of output shown in errors.
const LAST_LINES: usize = 20;

/// A child process for multi-process tests (engine instances that crash, stall
/// and fail over), whose standard output is collected line by line.
///
/// The child runs in a process group of its own and every signal goes to the
/// whole group, so `kill()` or `pause()` also reach what the child started
/// (`sh -c`, a `cargo run` wrapper...). The flip side: Ctrl-C in the terminal
/// does not reach the group; the `Process` kills it when dropped.
///
/// Standard output is read on a background thread; standard error and standard
/// input stay as configured on the `Command` (inherited by default).
///
/// ```no_run
/// use std::process::Command;
/// use std::time::Duration;
/// use ordo_testkit::Process;
///
/// let mut worker = Process::spawn(Command::new("my-worker"))?;
/// worker.wait_for_line(|line| line.contains("ready"), Duration::from_secs(10))?;
/// worker.pause()?; // SIGSTOP: it holds its leases but does nothing
/// worker.resume()?;
/// worker.kill()?; // SIGKILL, reaped
/// # Ok::<(), ordo_testkit::TestkitError>(())
/// ```
#[derive(Debug)]
pub struct Process {
    program: String,
    child: Child,
    pid: i32,
    /// Set once the child has been reaped; signals are refused from then on.
    status: Option<ExitStatus>,
    output: Arc<Output>,
    /// Index of the first line [`Process::wait_for_line`] has not consumed.
    cursor: usize,
}

/// Standard output shared with the reader thread.
#[derive(Debug, Default)]
struct Output {
    state: Mutex<OutputState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct OutputState {
    lines: Vec<String>,
    closed: bool,
}

impl Output {
    /// Locks the state; a reader thread that panicked leaves usable data behind.
    fn lock(&self) -> MutexGuard<'_, OutputState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Process {
    /// Starts `command` with piped stdout in a new process group, and starts
    /// collecting its output lines.
    pub fn spawn(mut command: Command) -> Result<Process> {
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|source| TestkitError::SpawnProcess {
                program: program.clone(),
                source,
            })?;
        let output = Arc::new(Output::default());
        if let Some(stdout) = child.stdout.take() {
            let shared = Arc::clone(&output);
            // Detached on purpose: a grandchild may hold the pipe open after the child dies.
            let reader = std::thread::Builder::new()
                .name(format!("ordo-process-{}", child.id()))
                .spawn(move || read_lines(stdout, &shared));
            if let Err(source) = reader {
                let _ = child.kill();
                let _ = child.wait();
                return Err(TestkitError::Io {
                    what: format!("start a thread reading `{program}`"),
                    source,
                });
            }
        }
        let pid = pid_of(&child);
        Ok(Process {
            program,
            child,
            pid,
            status: None,
            output,
            cursor: 0,
        })
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGKILL to the process group and reaps the child. Killing a
    /// process that has already exited does nothing.
    pub fn kill(&mut self) -> Result<()> {
        if self.poll_exit()?.is_some() {
            return Ok(());
        }
        signal::send_group(self.pid, Signal::SIGKILL)?;
        let status = self
            .child
            .wait()
            .map_err(TestkitError::io(format!("wait for `{}`", self.program)))?;
        self.status = Some(status);
        Ok(())
    }

    /// Sends SIGSTOP to the process group and returns once the child can take no
    /// further step (stopped, or blocked in the kernel until resumed).
    pub fn pause(&mut self) -> Result<()> {
        self.signal("pause", Signal::SIGSTOP)?;
        signal::wait_stopped(self.pid)
    }

    /// Sends SIGCONT to the process group.
    pub fn resume(&mut self) -> Result<()> {
        self.signal("resume", Signal::SIGCONT)
    }

    /// Sends SIGTERM to the process group, and does not wait; follow with
    /// [`Process::wait_timeout`] to see it exit.
    pub fn terminate(&mut self) -> Result<()> {
        self.signal("terminate", Signal::SIGTERM)
    }

    /// Waits up to `timeout` for the child to exit: `Some(status)` once it has,
    /// `None` if it still runs.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.poll_exit()? {
                return Ok(Some(status));
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Ok(None);
            }
            std::thread::sleep(POLL_INTERVAL.min(timeout - waited));
        }
    }

    /// Waits up to `deadline` for an output line matching `predicate` and returns it.
    ///
    /// Lines are consumed in order: each call looks only at lines after the one
    /// the previous call returned, so "wait for `ready`, then for `done`" works
    /// even if both were already printed. The error lists the last lines seen,
    /// and comes early if the child closes its stdout (exits) without a match.
    pub fn wait_for_line(
        &mut self,
        mut predicate: impl FnMut(&str) -> bool,
        deadline: Duration,
    ) -> Result<String> {
        let started = Instant::now();
        let mut scanned = self.cursor;
        let mut state = self.output.lock();
        loop {
            if let Some(offset) = state.lines[scanned..].iter().position(|line| predicate(line)) {
                let index = scanned + offset;
                self.cursor = index + 1;
                return Ok(state.lines[index].clone());
            }
            scanned = state.lines.len();
            let waited = started.elapsed();
            if state.closed || waited >= deadline {
                let last_lines = last_lines(&state.lines);
                drop(state);
                let reason = if waited >= deadline {
                    format!("within {deadline:?}")
                } else {
                    format!("before closing its stdout ({})", self.describe_exit())
                };
                return Err(TestkitError::LineNotSeen {
                    program: self.program.clone(),
                    pid: self.pid,
                    reason,
                    last_lines,
                });
            }
            state = match self.output.changed.wait_timeout(state, deadline - waited) {
                Ok((state, _)) => state,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Every line printed so far, without line terminators. Right after the
    /// child exited this may still miss its last lines (the reader thread
    /// reads them a moment later): use [`Process::all_lines`] then.
    pub fn lines(&self) -> Vec<String> {
        self.output.lock().lines.clone()
    }

    /// Every line the child printed, once its stdout is closed (it exited,
    /// and nothing it started holds the pipe), waiting up to `deadline` for
    /// that; a pipe still open then is an error naming the lines read.
    pub fn all_lines(&self, deadline: Duration) -> Result<Vec<String>> {
        let started = Instant::now();
        let mut state = self.output.lock();
        loop {
            if state.closed {
                return Ok(state.lines.clone());
            }
            let waited = started.elapsed();
            if waited >= deadline {
                return Err(TestkitError::OutputOpen {
                    program: self.program.clone(),
                    pid: self.pid,
                    deadline,
                    last_lines: last_lines(&state.lines),
                });
            }
            state = match self.output.changed.wait_timeout(state, deadline - waited) {
                Ok((state, _)) => state,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    fn signal(&mut self, action: &'static str, signal: Signal) -> Result<()> {
        if let Some(status) = self.poll_exit()? {
            let program = self.program.clone();
            return Err(TestkitError::ProcessExited {
                action,
                program,
                pid: self.pid,
                status,
            });
        }
        signal::send_group(self.pid, signal)
    }

    /// Reaps the child if it has exited.
    fn poll_exit(&mut self) -> Result<Option<ExitStatus>> {
        if self.status.is_none() {
            let what = format!("check whether `{}` has exited", self.program);
            self.status = self.child.try_wait().map_err(TestkitError::io(what))?;
        }
        Ok(self.status)
    }

    fn describe_exit(&mut self) -> String {
        // Stdout closes just before the exit is reapable; give it a moment.
        match self.wait_timeout(Duration::from_millis(200)) {
            Ok(Some(status)) => status.to_string(),
            Ok(None) => "still running".to_owned(),
            Err(error) => error.to_string(),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Also reaches grandchildren that outlived the child; nothing to report from drop.
        let _ = signal::send_group(self.pid, Signal::SIGKILL);
        if self.status.is_none() {
            let _ = self.child.wait();
        }
    }
}

/// The reader thread: appends each line (lossily decoded) and wakes waiters.
fn read_lines(stdout: impl Read, output: &Output) {
    let mut reader = BufReader::new(stdout);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match reader.read_until(b'\n', &mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buffer);
                output
                    .lock()
                    .lines
                    .push(line.trim_end_matches(['\r', '\n']).to_owned());
                output.changed.notify_all();
            }
        }
    }
    output.lock().closed = true;
    output.changed.notify_all();
}

fn last_lines(lines: &[String]) -> String {
    let shown = &lines[lines.len().saturating_sub(LAST_LINES)..];
    if shown.is_empty() {
        "(none)".to_owned()
    } else {
        shown.join("\n")
    }
}
