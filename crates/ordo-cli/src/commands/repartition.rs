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

/// Parses `per_key` or a number of partitions (as `[categories.NAME]
/// partitions` takes them).
pub(crate) fn parse_partitions(text: &str) -> Result<Partitions, String> {
    if text == "per_key" {
        return Ok(Partitions::PerKey);
    }
    text.parse::<u32>()
        .ok()
        .filter(|n| *n <= ordo_core::contract::key::MAX_HASHED_PARTITIONS)
        .and_then(std::num::NonZeroU32::new)
        .map(Partitions::Hashed)
        .ok_or_else(|| {
            format!(
                "`{text}` is neither `per_key` nor a number of partitions between 1 and {}",
                ordo_core::contract::key::MAX_HASHED_PARTITIONS
            )
        })
}

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

#[cfg(test)]
mod tests {
    use super::parse_partitions;

    #[test]
    fn partitions_are_per_key_or_a_number_in_range() {
        assert_eq!(
            parse_partitions("per_key").unwrap(),
            ordo_core::Partitions::PerKey
        );
        assert_eq!(parse_partitions("256").unwrap().to_string(), "256");
        for bad in ["0", "-1", "65537", "hashed", ""] {
            let error = parse_partitions(bad).unwrap_err();
            assert!(error.contains(&format!("`{bad}`")), "{error}");
        }
    }
}
