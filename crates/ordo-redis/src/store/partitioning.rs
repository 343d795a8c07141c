//! How each category is partitioned, as recorded in Redis: every process
//! that publishes or consumes a partitioned category checks that its
//! configuration (`[categories.NAME] partitions`) agrees with the record,
//! so a process configured otherwise never sends a key's messages to other
//! partitions than its earlier ones. Changing a category's partitions is
//! an offline operation ([`PartitionAdmin::repartition`]): drain, then
//! switch.
//!
//! [`PartitionAdmin::repartition`]: crate::PartitionAdmin::repartition

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fred::clients::Pool;
use fred::interfaces::KeysInterface;
use fred::types::{Expiration, SetOptions};
use ordo_core::Partitions;

use crate::error::{Error, Result};
use crate::store::keys::{PartitionId, index, index_directory, partitioning};

/// How long a process trusts a check before reading the record again, so a
/// publisher left running across a repartition stops within this long.
pub(crate) const RECHECK: Duration = Duration::from_secs(5);

/// The text a record holds: `per_key` or the number of partitions.
fn text(partitions: Partitions) -> String {
    partitions.to_string()
}

/// A record's text, read back.
fn parse(category: &str, text: &str) -> Result<Partitions> {
    if text == "per_key" {
        return Ok(Partitions::PerKey);
    }
    text.parse()
        .ok()
        .and_then(std::num::NonZeroU32::new)
        .map(Partitions::Hashed)
        .ok_or_else(|| {
            Error::protocol(
                "partitioning record",
                format!("`{}` holds `{text}`", partitioning(category)),
            )
        })
}

/// How `category` is partitioned according to Redis (`None`: not recorded
/// yet).
pub(crate) async fn recorded(client: &Pool, category: &str) -> Result<Option<Partitions>> {
    let text: Option<String> = client.get(partitioning(category)).await?;
    text.map(|text| parse(category, &text)).transpose()
}

/// Checks that `category` is partitioned as `configured` in Redis, and
/// records it when nothing is recorded yet (refusing to record hashed
/// partitions over partitions of single keys published before).
pub(crate) async fn ensure(client: &Pool, category: &str, configured: Partitions) -> Result<()> {
    let mismatch = |recorded| Error::PartitioningMismatch {
        category: category.to_owned(),
        recorded,
        configured,
    };
    if let Some(recorded) = recorded(client, category).await? {
        return if recorded == configured {
            Ok(())
        } else {
            Err(mismatch(recorded))
        };
    }
    if matches!(configured, Partitions::Hashed(_)) {
        let members =
            crate::store::buckets::members(client, &index_directory(category), |slot| index(category, slot))
                .await?;
        if members
            .iter()
            .any(|member| !PartitionId::from_member(category, member).is_hashed())
        {
            return Err(mismatch(Partitions::PerKey));
        }
    }
    let set: Option<String> = client
        .set(
            partitioning(category),
            text(configured),
            None::<Expiration>,
            Some(SetOptions::NX),
            false,
        )
        .await?;
    if set.is_some() {
        return Ok(());
    }
    // Another process recorded it meanwhile.
    match recorded(client, category).await? {
        Some(recorded) if recorded != configured => Err(mismatch(recorded)),
        _ => Ok(()),
    }
}

/// Records `category` as partitioned `partitions`, whatever it was.
pub(crate) async fn record(client: &Pool, category: &str, partitions: Partitions) -> Result<()> {
    let _: Option<String> = client
        .set(partitioning(category), text(partitions), None, None, false)
        .await?;
    Ok(())
}

/// The categories a process checked, and when: a check holds for
/// [`RECHECK`].
#[derive(Debug, Default)]
pub(crate) struct Checked(Mutex<HashMap<String, Instant>>);

impl Checked {
    /// Checks every category of `categories` not checked in the last
    /// [`RECHECK`] (see [`ensure`]).
    pub(crate) async fn ensure<'a>(
        &self,
        client: &Pool,
        categories: impl IntoIterator<Item = (&'a str, Partitions)>,
    ) -> Result<()> {
        let now = Instant::now();
        let due: Vec<(&str, Partitions)> = {
            let checked = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut due: Vec<(&str, Partitions)> = categories
                .into_iter()
                .filter(|(category, _)| {
                    checked
                        .get(*category)
                        .is_none_or(|at| now.duration_since(*at) >= RECHECK)
                })
                .collect();
            due.sort_unstable_by_key(|(category, _)| *category);
            due.dedup_by_key(|(category, _)| *category);
            due
        };
        for (category, partitions) in due {
            ensure(client, category, partitions).await?;
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(category.to_owned(), now);
        }
        Ok(())
    }
}
