//! `ordo partitions CATEGORY`: one row per partition and consumer group.

use serde::Serialize;

use crate::cli::PartitionsArgs;
use crate::context::Context;
use crate::exit::{Failure, Verdict};
use crate::format;
use crate::table::{Align, Table};
use crate::view::{HaltView, lane_name, pretty};

/// Errors are cut to this many characters in the table.
const ERROR_WIDTH: usize = 50;

/// One partition as one group sees it.
#[derive(Debug, Serialize)]
struct PartitionRow {
    key: String,
    /// `null` when no group consumes the category.
    group: Option<String>,
    /// The lease holder's instance id.
    owner: Option<String>,
    /// The lease's fencing token.
    generation: Option<u64>,
    lag: u64,
    pending: u64,
    /// Since the newest entry was published (server clock).
    idle_ms: Option<u64>,
    /// The lanes that exist.
    lanes: Vec<&'static str>,
    halt: Option<HaltView>,
}

pub(crate) async fn run(ctx: &Context, args: &PartitionsArgs) -> Result<Verdict, Failure> {
    ctx.ensure_category(&args.category).await?;
    let mut groups = ctx.status.groups(&args.category).await?;
    if let Some(group) = &args.group {
        if !groups.contains(group) {
            return Err(Failure::Usage(format!(
                "group `{group}` does not consume category `{}`; its groups: {}",
                args.category,
                if groups.is_empty() {
                    "none".to_owned()
                } else {
                    groups.join(", ")
                }
            )));
        }
        groups = vec![group.clone()];
    }
    let partitions = ctx.status.partitions(&args.category, &groups).await?;
    let mut rows = Vec::new();
    for partition in &partitions {
        let lanes: Vec<&'static str> = partition.lanes.iter().map(|l| lane_name(l.lane)).collect();
        let idle_ms = partition
            .idle_for
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        if partition.groups.is_empty() && !args.halted {
            rows.push(PartitionRow {
                key: partition.key.clone(),
                group: None,
                owner: None,
                generation: None,
                lag: partition.lanes.iter().map(|l| l.length).sum(),
                pending: 0,
                idle_ms,
                lanes: lanes.clone(),
                halt: None,
            });
        }
        for position in &partition.groups {
            if args.halted && position.halt.is_none() {
                continue;
            }
            rows.push(PartitionRow {
                key: partition.key.clone(),
                group: Some(position.group.clone()),
                owner: position.owner.as_ref().map(|o| o.instance.clone()),
                generation: position.owner.as_ref().map(|o| o.token),
                lag: position.lag,
                pending: position.pending,
                idle_ms,
                lanes: lanes.clone(),
                halt: position.halt.as_ref().map(HaltView::from),
            });
        }
    }
    if args.json {
        print!("{}", pretty(&rows)?);
    } else if rows.is_empty() {
        println!(
            "no {}partitions in category `{}`",
            if args.halted { "halted " } else { "" },
            args.category
        );
    } else {
        print!("{}", table(&rows).render());
    }
    Ok(Verdict::Ok)
}

fn table(rows: &[PartitionRow]) -> Table {
    let mut table = Table::new(&[
        ("KEY", Align::Left),
        ("GROUP", Align::Left),
        ("OWNER", Align::Left),
        ("GENERATION", Align::Right),
        ("LAG", Align::Right),
        ("PENDING", Align::Right),
        ("IDLE", Align::Right),
        ("LANES", Align::Left),
        ("HALTED", Align::Left),
    ]);
    for row in rows {
        let dash = || "-".to_owned();
        table.row(vec![
            row.key.clone(),
            row.group.clone().unwrap_or_else(dash),
            row.owner.clone().unwrap_or_else(dash),
            row.generation.map(|g| g.to_string()).unwrap_or_else(dash),
            format::count(row.lag),
            format::count(row.pending),
            row.idle_ms
                .map(|ms| format::duration(std::time::Duration::from_millis(ms)))
                .unwrap_or_else(dash),
            if row.lanes.is_empty() {
                dash()
            } else {
                row.lanes.join(",")
            },
            match &row.halt {
                Some(halt) => format!(
                    "HALTED at {} after {}: {}",
                    halt.head,
                    format::plural(u64::from(halt.attempts), "attempt"),
                    format::truncate(&halt.error, ERROR_WIDTH)
                ),
                None => "no".to_owned(),
            },
        ]);
    }
    table
}
