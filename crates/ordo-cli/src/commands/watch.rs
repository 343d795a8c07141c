//! `ordo watch`: the status, refreshed in place until Ctrl-C.
//!
//! On a terminal each frame is drawn over the previous one (cursor home,
//! each line cleared to its end, the rest of the screen cleared), so the
//! view does not flicker or scroll. When stdout is not a terminal the
//! frames are printed one after another; with `--json` each frame is one
//! JSON line.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::cli::WatchArgs;
use crate::commands::status;
use crate::context::Context;
use crate::exit::{Failure, Verdict};
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
    loop {
        let frame = tokio::select! {
            _ = &mut ctrl_c => break,
            frame = frame(ctx, args, threshold, interval) => frame,
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
async fn frame(ctx: &Context, args: &WatchArgs, threshold: u64, interval: Duration) -> String {
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
