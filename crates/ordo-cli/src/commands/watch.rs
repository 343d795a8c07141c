//! `ordo watch`: the status, refreshed in place until Ctrl-C.
//!
//! On a terminal each frame is drawn over the previous one (cursor home,
//! each line cleared to its end, the rest of the screen cleared), so the
//! view does not flicker or scroll. When stdout is not a terminal the
//! frames are printed one after another; with `--json` each frame is one
//! JSON line.
//!
//! From the second frame on, each consumer group's backlog (lag plus
//! pending) is compared with the previous frame's: the net rate at which it
//! drains (or grows) and, while it drains, the time left at that rate.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::cli::WatchArgs;
use crate::commands::status;
use crate::context::Context;
use crate::exit::{Failure, Verdict};
use crate::table::{Align, Table};
use crate::view::Snapshot;

const CLEAR_SCREEN: &str = "\x1b[2J";
const HOME: &str = "\x1b[H";
const CLEAR_LINE_END: &str = "\x1b[K";
const CLEAR_BELOW: &str = "\x1b[J";
const HIDE_CURSOR: &str = "\x1b[?25l";
const SHOW_CURSOR: &str = "\x1b[?25h";

pub(crate) async fn run(ctx: &Context, args: &WatchArgs) -> Result<Verdict, Failure> {
    if !(args.interval.is_finite() && args.interval > 0.0) {
        return Err(Failure::Usage(format!(
            "--interval must be a positive number of seconds, got {}",
            args.interval
        )));
    }
    let interval = Duration::from_secs_f64(args.interval);
    let threshold = args.warn_partitions.unwrap_or(ctx.settings.warn_partitions);
    let terminal = !args.json && std::io::stdout().is_terminal();
    if terminal {
        draw(&format!("{CLEAR_SCREEN}{HIDE_CURSOR}"));
    }
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut frames = 0_u64;
    let mut previous = Backlogs::default();
    loop {
        let frame = tokio::select! {
            _ = &mut ctrl_c => break,
            frame = frame(ctx, args, threshold, interval, &mut previous) => frame,
        };
        if terminal {
            draw(&in_place(&frame));
        } else {
            draw(&frame);
        }
        frames += 1;
        if args.count.is_some_and(|count| frames >= count) {
            break;
        }
        tokio::select! {
            _ = &mut ctrl_c => break,
            () = tokio::time::sleep(interval) => {}
        }
    }
    if terminal {
        draw(&format!("{SHOW_CURSOR}\n"));
    }
    Ok(Verdict::Ok)
}

/// One frame of the view. A failed read (Redis restarting, say) is shown
/// in the frame, and the next refresh tries again.
async fn frame(
    ctx: &Context,
    args: &WatchArgs,
    threshold: u64,
    interval: Duration,
    previous: &mut Backlogs,
) -> String {
    let snapshot = status::snapshot(ctx, &args.categories, threshold).await;
    if args.json {
        let line = match &snapshot {
            Ok(snapshot) => crate::view::compact(snapshot),
            Err(failure) => crate::view::compact(&serde_json::json!({ "error": failure.to_string() })),
        };
        return line.unwrap_or_else(|e| format!("{{\"error\":\"cannot encode the snapshot: {e}\"}}")) + "\n";
    }
    let mut out = format!(
        "ordo watch  {}  every {}  (Ctrl-C to exit)",
        ctx.settings.redis_url,
        crate::format::duration(interval)
    );
    match &snapshot {
        Ok(snapshot) => {
            let _ = writeln!(out, "  {}", clock(snapshot));
            out.push('\n');
            out.push_str(&body(snapshot));
            let current = Backlogs::of(snapshot);
            if !current.groups.is_empty() {
                out.push('\n');
                out.push_str(&drain_table(previous, &current).render());
            }
            *previous = current;
        }
        Err(failure) => {
            let _ = writeln!(
                out,
                "\n\ncannot read the cluster state: {}",
                crate::format::text(&failure.to_string())
            );
        }
    }
    out
}

/// Lag per category and group, then the halted partitions and warnings.
fn body(snapshot: &Snapshot) -> String {
    if snapshot.categories.is_empty() {
        return "no Ordo categories found\n".to_owned();
    }
    let mut out = status::categories_table(snapshot).render();
    out.push('\n');
    out.push_str(&status::halted_section(snapshot));
    for warning in &snapshot.warnings {
        let _ = write!(out, "\nwarning: {}\n", crate::format::text(warning));
    }
    out
}

/// Each consumer group's backlog (lag plus pending) at a server time.
#[derive(Debug, Default)]
struct Backlogs {
    server_time_ms: u64,
    groups: BTreeMap<(String, String), u64>,
}

impl Backlogs {
    fn of(snapshot: &Snapshot) -> Self {
        let groups = snapshot
            .categories
            .iter()
            .flat_map(|category| {
                category.groups.iter().map(|group| {
                    (
                        (category.category.clone(), group.group.clone()),
                        group.lag + group.pending,
                    )
                })
            })
            .collect();
        Self {
            server_time_ms: snapshot.server_time_ms,
            groups,
        }
    }
}

/// How a backlog moved between two frames.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Drain {
    /// No earlier frame to compare with.
    Unknown,
    /// Nothing left.
    Drained,
    /// Net messages handled per second (positive), and the time left at
    /// that rate.
    Draining { per_s: f64, left: Duration },
    /// The backlog grows, by this many messages per second.
    Growing { per_s: f64 },
    /// Neither: no message handled on balance.
    Stalled,
}

/// The backlog's move from `before` (at `before_ms`) to `now` (at `now_ms`).
fn drain(before: Option<u64>, before_ms: u64, now: u64, now_ms: u64) -> Drain {
    if now == 0 {
        return Drain::Drained;
    }
    let Some(before) = before else {
        return Drain::Unknown;
    };
    let seconds = now_ms.saturating_sub(before_ms) as f64 / 1_000.0;
    if seconds <= 0.0 {
        return Drain::Unknown;
    }
    let per_s = (before as f64 - now as f64) / seconds;
    if per_s > 0.0 {
        Drain::Draining {
            per_s,
            left: Duration::from_secs_f64(now as f64 / per_s),
        }
    } else if per_s < 0.0 {
        Drain::Growing { per_s: -per_s }
    } else {
        Drain::Stalled
    }
}

/// The backlog of every group, its rate and time to drain.
fn drain_table(previous: &Backlogs, current: &Backlogs) -> Table {
    let mut table = Table::new(&[
        ("CATEGORY", Align::Left),
        ("GROUP", Align::Left),
        ("BACKLOG", Align::Right),
        ("RATE", Align::Right),
        ("TO DRAIN", Align::Right),
    ]);
    for ((category, group), backlog) in &current.groups {
        let before = previous.groups.get(&(category.clone(), group.clone())).copied();
        let (rate, left) = match drain(before, previous.server_time_ms, *backlog, current.server_time_ms) {
            Drain::Unknown => ("-".to_owned(), "-".to_owned()),
            Drain::Drained => ("-".to_owned(), "drained".to_owned()),
            Drain::Draining { per_s, left } => (
                format!("{}/s", crate::format::count(per_s.round() as u64)),
                crate::format::duration(left),
            ),
            Drain::Growing { per_s } => (
                format!("+{}/s", crate::format::count(per_s.round() as u64)),
                "growing".to_owned(),
            ),
            Drain::Stalled => ("0/s".to_owned(), "stalled".to_owned()),
        };
        table.row(vec![
            category.clone(),
            group.clone(),
            crate::format::count(*backlog),
            rate,
            left,
        ]);
    }
    table
}

/// The server time of `snapshot`, `HH:MM:SS UTC`.
fn clock(snapshot: &Snapshot) -> String {
    let seconds = snapshot.server_time_ms / 1_000 % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        seconds / 3_600,
        seconds % 3_600 / 60,
        seconds % 60
    )
}

/// `frame` drawn over the previous one.
fn in_place(frame: &str) -> String {
    let mut out = String::from(HOME);
    for line in frame.lines() {
        out.push_str(line);
        out.push_str(CLEAR_LINE_END);
        out.push('\n');
    }
    out.push_str(CLEAR_BELOW);
    out
}

fn draw(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Drain, drain};

    #[test]
    fn the_rate_is_the_backlog_s_net_change_and_the_time_left_follows() {
        assert_eq!(drain(None, 0, 10, 1_000), Drain::Unknown);
        assert_eq!(drain(Some(10), 0, 0, 1_000), Drain::Drained);
        assert_eq!(
            drain(Some(1_000), 0, 600, 2_000),
            Drain::Draining {
                per_s: 200.0,
                left: Duration::from_secs(3)
            }
        );
        assert_eq!(drain(Some(100), 0, 150, 500), Drain::Growing { per_s: 100.0 });
        assert_eq!(drain(Some(100), 0, 100, 500), Drain::Stalled);
        assert_eq!(drain(Some(100), 500, 100, 500), Drain::Unknown);
    }
}
