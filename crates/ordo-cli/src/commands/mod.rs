//! One module per command.

pub(crate) mod act;
pub(crate) mod bulk;
pub(crate) mod dlq;
pub(crate) mod inspect;
pub(crate) mod partitions;
pub(crate) mod repartition;
pub(crate) mod setup;
pub(crate) mod status;
pub(crate) mod watch;

use std::io::{BufRead, IsTerminal, Write};

use crate::exit::Failure;

/// Asks `question` on the terminal unless `yes`; refuses (exit 3) when the
/// answer is not yes, or when stdin is not a terminal and `--yes` was not
/// given (a script must say what it wants).
pub(crate) fn confirm(question: &str, yes: bool, what: &str) -> Result<(), Failure> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::Refused(format!(
            "not {what} without confirmation: stdin is not a terminal (pass --yes to confirm)"
        )));
    }
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "{question} [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::Error(anyhow::Error::from(e).context("cannot read the answer")))?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        Err(Failure::Refused(format!("not {what}: not confirmed")))
    }
}
