//! Setting a Redis up for this release of Ordo, as an administrator: what
//! `ordo setup` runs.
//!
//! - **The function library**: Ordo's scripts are one Redis Functions
//!   library (`ordo_<hash>`, see the scripts module). Its roles' ACL users
//!   may call it but not load code, so an administrator loads it, on every
//!   primary of a cluster, before the processes of a release start (and
//!   again on a primary added to the cluster). Libraries of other releases
//!   are listed, and deleted on request once no process of theirs runs.
//! - **Halted sets per category**: releases before the per-category halted
//!   sets listed every category's halts in `{<slot_tag>}:ordo:halted`;
//!   each halt still recorded there moves to its category's set
//!   (`{<slot_tag>}:<category>:__halted__`), and the old set goes. Running
//!   it again moves what processes of the old release added since.
//!
//! Everything here is idempotent: run it at every upgrade.

use fred::clients::Pool;
use fred::interfaces::{FunctionInterface, KeysInterface, SetsInterface};
use fred::types::Value;

use crate::error::{Error, Result};
use crate::net::nodes::{self, Node};
use crate::store::keys::{
    LEGACY_HALTED_DIRECTORY, halted, halted_directory, halted_member_category, legacy_halted,
};
use crate::store::scripts;

/// What [`run`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The name of this release's function library (`ordo_<hash>`).
    pub library: String,
    /// On how many primaries it is loaded now (1 on a single Redis).
    pub primaries: usize,
    /// Ordo libraries of other releases still loaded (on any primary).
    pub other_libraries: Vec<String>,
    /// Of those, the ones deleted (every one, when asked to).
    pub deleted_libraries: Vec<String>,
    /// Halts moved from the old halted set to their categories' sets.
    pub halts_moved: u64,
}

/// The name of the function library this build of Ordo calls.
pub fn library_name() -> &'static str {
    scripts::library().name()
}

/// Loads this release's function library on every primary, lists (and,
/// with `delete_other_libraries`, deletes) the Ordo libraries of other
/// releases, and moves halts out of the old, shared halted set. Needs an
/// administrator's user: `FUNCTION LOAD`, `FUNCTION LIST`, `FUNCTION
/// DELETE` and Ordo's keys (the `default` user of a Redis without ACL
/// users has all of it).
///
/// # Errors
///
/// [`Error::LibraryNotLoaded`] when the user may not load functions; a
/// Redis error for any other refusal or failure.
pub async fn run(client: &Pool, delete_other_libraries: bool) -> Result<Report> {
    let node_client = client.next();
    scripts::load(node_client).await?;
    let library = library_name().to_owned();
    let listed = nodes::on_every_node(node_client, |_, node| async move {
        let listed: Value = node.function_list(Some("ordo_*"), false).await?;
        Ok(library_names(listed))
    })
    .await?;
    let primaries = listed.len();
    let mut other_libraries: Vec<String> = listed
        .iter()
        .flat_map(|(_, names)| names.iter().cloned())
        .filter(|name| *name != library && is_ordo_library(name))
        .collect();
    other_libraries.sort();
    other_libraries.dedup();
    let mut deleted_libraries = Vec::new();
    if delete_other_libraries {
        for (node, names) in &listed {
            for name in names.iter().filter(|name| other_libraries.contains(name)) {
                delete_library(node_client, node, name).await?;
            }
        }
        deleted_libraries = other_libraries.clone();
    }
    let halts_moved = move_legacy_halts(client).await?;
    Ok(Report {
        library,
        primaries,
        other_libraries,
        deleted_libraries,
        halts_moved,
    })
}

/// Whether `name` is the name of an Ordo library (`ordo_` and 12 hex
/// digits), not merely one matching `ordo_*`.
fn is_ordo_library(name: &str) -> bool {
    name.strip_prefix("ordo_")
        .is_some_and(|hash| hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The `library_name` of every library in a `FUNCTION LIST` reply.
fn library_names(listed: Value) -> Vec<String> {
    let mut names = Vec::new();
    for library in scripts::array(listed) {
        let fields = match library {
            Value::Map(map) => map
                .iter()
                .flat_map(|(key, value)| [Value::from(key.clone()), value.clone()])
                .collect(),
            other => scripts::array(other),
        };
        let mut fields = fields.into_iter();
        while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
            if name.as_str().as_deref() == Some("library_name")
                && let Some(value) = value.as_string()
            {
                names.push(value);
            }
        }
    }
    names
}

async fn delete_library(client: &fred::clients::Client, node: &Node, name: &str) -> Result<()> {
    let routed = node.route(client);
    match routed.function_delete::<Value, _>(name).await {
        Ok(_) => Ok(()),
        // Deleted meanwhile (another `ordo setup`).
        Err(error) if error.details().contains("Library not found") => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Moves every halt listed in the old halted set (every category's, per
/// slot) to its category's set, when its record still exists; returns how
/// many moved. The old buckets and their directory are deleted once empty.
async fn move_legacy_halts(client: &Pool) -> Result<u64> {
    let slots = crate::store::buckets::listed(client, LEGACY_HALTED_DIRECTORY).await?;
    let mut moved = 0;
    for slot in slots {
        let bucket = legacy_halted(slot);
        let members: Vec<String> = client.smembers(&bucket).await?;
        for member in members {
            let category = halted_member_category(&member).ok_or_else(|| {
                Error::protocol(
                    "SMEMBERS",
                    format!("`{bucket}` lists `{member}`, which names no category's halt"),
                )
            })?;
            // A halt resolved since is not listed again.
            if client.exists::<bool, _>(&member).await? {
                crate::store::buckets::list(client, &halted_directory(category), &[slot]).await?;
                let _: Value = client.sadd(halted(category, slot), &member).await?;
                moved += 1;
            }
            let _: Value = client.srem(&bucket, &member).await?;
        }
    }
    let _: Value = client.del(LEGACY_HALTED_DIRECTORY).await?;
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use ordo_testkit::RedisCluster;

    use super::*;
    use crate::net::connection::test_pool;

    /// On a cluster the library goes to every primary; a primary that
    /// lacks it (added to the cluster later, or restarted without
    /// persistence) gets it from a client that may load it, and from
    /// `setup`.
    #[tokio::test]
    async fn the_library_is_loaded_on_every_primary() {
        let cluster = RedisCluster::start_local().unwrap();
        let pool = test_pool(&cluster.url(), 2).await;
        let report = run(&pool, false).await.unwrap();
        assert_eq!(report.primaries, 3);
        let primaries = cluster.primaries().unwrap();
        let node = |index: usize| {
            let url = cluster.node(index).unwrap().url();
            async move { crate::store::scripts::tests::connect(&url).await }
        };
        for index in &primaries {
            let listed: Value = node(*index)
                .await
                .function_list(Some(library_name()), false)
                .await
                .unwrap();
            assert_eq!(library_names(listed), [library_name()], "node {index}");
        }
        let emptied = node(primaries[1]).await;
        let _: () = emptied.function_flush(false).await.unwrap();
        assert!(scripts::ensure_loaded(pool.next()).await.unwrap(), "loaded again");
        let listed: Value = emptied.function_list(Some(library_name()), false).await.unwrap();
        assert_eq!(library_names(listed), [library_name()]);
        assert!(!scripts::ensure_loaded(pool.next()).await.unwrap());
    }

    #[test]
    fn only_names_of_ordo_libraries_count() {
        assert!(is_ordo_library("ordo_0123456789ab"));
        assert!(!is_ordo_library("ordo_app"));
        assert!(!is_ordo_library("ordo_0123456789abc"));
        assert!(is_ordo_library(library_name()));
    }
}
