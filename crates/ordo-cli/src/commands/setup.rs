//! `ordo setup`: prepares a Redis for this release of Ordo, as a Redis user
//! that may load functions (an administrator): loads Ordo's function
//! library on every primary, lists (or deletes) the libraries of other
//! releases, and moves halts out of the old shared halted set. Idempotent:
//! run it before starting the processes of a new release, after adding a
//! primary to a cluster, and once more when the last process of an older
//! release stopped.

use serde::Serialize;

use crate::cli::SetupArgs;
use crate::context::Context;
use crate::exit::{Failure, Verdict};
use crate::view::pretty;

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct SetupView {
    library: String,
    primaries: usize,
    other_libraries: Vec<String>,
    deleted_libraries: Vec<String>,
    halts_moved: u64,
}

pub(crate) async fn run(ctx: &Context, args: &SetupArgs) -> Result<Verdict, Failure> {
    let report = ordo_redis::setup::run(ctx.broker.client(), args.delete_old_libraries).await?;
    let view = SetupView {
        library: report.library,
        primaries: report.primaries,
        other_libraries: report.other_libraries,
        deleted_libraries: report.deleted_libraries,
        halts_moved: report.halts_moved,
    };
    if args.json {
        print!("{}", pretty(&view)?);
        return Ok(Verdict::Ok);
    }
    let on = if view.primaries == 1 {
        "this Redis".to_owned()
    } else {
        format!("{} primaries", view.primaries)
    };
    println!("function library `{}`: loaded on {on}", view.library);
    let kept: Vec<&String> = view
        .other_libraries
        .iter()
        .filter(|name| !view.deleted_libraries.contains(name))
        .collect();
    if !view.deleted_libraries.is_empty() {
        println!(
            "deleted the libraries of other releases: {}",
            view.deleted_libraries.join(", ")
        );
    }
    if !kept.is_empty() {
        let names: Vec<&str> = kept.iter().map(|name| name.as_str()).collect();
        println!(
            "libraries of other releases still loaded: {} (once no process of those releases runs: \
             `ordo setup --delete-old-libraries`)",
            names.join(", ")
        );
    }
    if view.halts_moved > 0 {
        println!(
            "moved {} from the old shared halted set to their categories' sets",
            crate::format::plural(view.halts_moved, "halt")
        );
    }
    Ok(Verdict::Ok)
}
