//! `ordo repartition CATEGORY --to N|per_key`: the offline step that
//! changes how a category is partitioned, between draining it and starting
//! its processes with the new `[categories.NAME] partitions`.
//!
//! Refused (exit 3, nothing changed) unless every consumer group has
//! handled every message of the category: changing the partitions moves
//! keys to other partitions, so a key's earlier messages must all be
//! handled first, or the key could run in two partitions at once.

use ordo_core::Partitions;
use ordo_redis::Error;

use crate::cli::RepartitionArgs;
use crate::context::Context;
use crate::exit::{Failure, Verdict};

pub(crate) async fn run(ctx: &Context, args: &RepartitionArgs) -> Result<Verdict, Failure> {
    let category = &args.category;
    ctx.ensure_category(category).await?;
    super::confirm(
        &format!("Partition category `{category}` as `{}` from now on?", args.to),
        args.yes,
        "repartitioned",
    )?;
    match ctx.admin.repartition(category, args.to).await {
        Ok(before) => {
            let before = before.map_or_else(|| "not recorded".to_owned(), |b| format!("`{b}`"));
            println!(
                "category `{category}`: partitioned `{}` (was {before}); start its processes with \
                 `[categories.{category}] partitions = {}`",
                args.to,
                toml_value(args.to)
            );
            Ok(Verdict::Ok)
        }
        Err(error @ Error::NotDrained { .. }) => Err(Failure::Refused(error.to_string())),
        Err(error) => Err(Failure::Error(anyhow::Error::from(error))),
    }
}

/// How `partitions` is written in domain.toml.
fn toml_value(partitions: Partitions) -> String {
    match partitions {
        Partitions::PerKey => "\"per_key\"".to_owned(),
        Partitions::Hashed(n) => n.to_string(),
    }
}
