//! The connection every command works through, and the lookups they share.

use fred::interfaces::ClientLike;
use ordo_redis::{ClusterStatus, PartitionAdmin, PartitionKeys, RedisBroker};

use crate::exit::Failure;
use crate::settings::CliSettings;

/// Connections a CLI run needs: one for commands, one spare for pipelines.
const POOL_SIZE: usize = 2;

/// What a command works with.
#[derive(Debug)]
pub(crate) struct Context {
    pub(crate) settings: CliSettings,
    /// The broker: its publish path is the one `dlq replay` reuses. It is
    /// never run, so this process owns no partition.
    pub(crate) broker: RedisBroker,
    pub(crate) admin: PartitionAdmin,
    pub(crate) status: ClusterStatus,
}

impl Context {
    /// Connects to the configured Redis.
    pub(crate) async fn connect(settings: CliSettings) -> Result<Self, Failure> {
        let broker = RedisBroker::builder(settings.redis_url.expose())
            .config(settings.config.clone())
            .tls(settings.tls.clone())
            .pool_size(POOL_SIZE)
            .build()
            .await
            .map_err(|error| match error {
                // Already names the URL (its password masked).
                error @ ordo_redis::Error::Connect { .. } => anyhow::Error::from(error),
                error => anyhow::Error::from(error)
                    .context(format!("cannot use the Redis at {}", settings.redis_url)),
            })?;
        Ok(Self {
            admin: broker.admin(),
            status: broker.status(),
            broker,
            settings,
        })
    }

    /// Closes the connections.
    pub(crate) async fn close(&self) {
        let _ = self.broker.client().quit().await;
    }

    /// The streams and bookkeeping keys of the partition of `category`
    /// that `key` is in (its own, or a hashed one: `[categories.NAME]
    /// partitions` of domain.toml).
    pub(crate) fn partition(&self, category: &str, key: &str) -> PartitionKeys {
        PartitionKeys::of(
            self.broker.routing().partition_of(category, key),
            self.settings.config.priority_lanes().backfill_suffix(),
        )
    }

    /// The consumer group an action on `category:key` is about: `given`
    /// (which must consume the category), else the category's only group.
    /// Several groups without `--group` is a usage error that lists them and
    /// says which of them are halted on this key.
    pub(crate) async fn resolve_group(
        &self,
        category: &str,
        key: &str,
        given: Option<&str>,
    ) -> Result<String, Failure> {
        let groups = self.status.groups(category).await?;
        match (given, groups.as_slice()) {
            (Some(group), _) if groups.iter().any(|g| g == group) => Ok(group.to_owned()),
            (Some(group), []) => Err(Failure::Usage(format!(
                "no consumer group is registered on category `{category}` (so `{group}` cannot be \
                 checked); is the category name right?{}",
                self.known_categories_hint().await
            ))),
            (Some(group), _) => Err(Failure::Usage(format!(
                "group `{group}` does not consume category `{category}`; its groups: {}",
                groups.join(", ")
            ))),
            (None, [only]) => Ok(only.clone()),
            (None, []) => Err(Failure::Usage(format!(
                "no consumer group is registered on category `{category}`{}",
                self.known_categories_hint().await
            ))),
            (None, _) => {
                let halted: Vec<String> = self
                    .admin
                    .halted_in(category)
                    .await?
                    .into_iter()
                    .filter(|h| h.key == key)
                    .map(|h| h.group)
                    .collect();
                let halted = if halted.is_empty() {
                    String::new()
                } else {
                    format!(" (halted on key `{key}`: {})", halted.join(", "))
                };
                Err(Failure::Usage(format!(
                    "category `{category}` is consumed by several groups: {}{halted}; pass --group GROUP",
                    groups.join(", ")
                )))
            }
        }
    }

    /// A usage error unless `category` has a partition index or a
    /// registered consumer group.
    pub(crate) async fn ensure_category(&self, category: &str) -> Result<(), Failure> {
        if !self.status.groups(category).await?.is_empty()
            || !self.status.partition_keys(category).await?.is_empty()
        {
            return Ok(());
        }
        Err(Failure::Usage(format!(
            "unknown category `{category}`: it has no partition index and no consumer group{}",
            self.known_categories_hint().await
        )))
    }

    /// `; known categories: ...` (or nothing when the lookup fails).
    async fn known_categories_hint(&self) -> String {
        match self.status.categories().await {
            Ok(categories) if !categories.is_empty() => {
                format!("; known categories: {}", categories.join(", "))
            }
            _ => String::new(),
        }
    }
}
