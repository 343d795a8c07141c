//! `ordo setup` on a Redis an older release left: its halts listed in the
//! old shared halted set, and another release's function library loaded.

use crate::common;

use common::{CATEGORY, Fixture};
use fred::interfaces::{FunctionInterface, KeysInterface, SetsInterface};
use fred::types::Value;
use ordo_redis::PartitionKeys;

/// What an older release's halted set looks like: every category's halts
/// in `{<slot_tag>}:ordo:halted`, its slots in `{ordo}:__halted_buckets__`.
fn legacy_halted(partition: &PartitionKeys) -> String {
    partition
        .halted()
        .replace(&format!(":{CATEGORY}:__halted__"), ":ordo:halted")
}

const LEGACY_DIRECTORY: &str = "{ordo}:__halted_buckets__";

/// A library of another (made-up) release, and one of an application
/// whose name only starts like Ordo's.
const OLD_LIBRARY: &str = "ordo_0123456789ab";
const APP_LIBRARY: &str = "ordo_app";

fn library_code(name: &str) -> String {
    format!("#!lua name={name}\nredis.register_function('{name}_f', function() return 1 end)")
}

/// The libraries loaded, by name.
async fn libraries(fixture: &Fixture) -> anyhow::Result<String> {
    let listed: Value = fixture
        .broker
        .client()
        .function_list(None::<String>, false)
        .await?;
    Ok(format!("{listed:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_moves_halts_out_of_the_old_shared_set_and_lists_old_libraries() -> anyhow::Result<()> {
    let mut fixture = Fixture::start(true, false).await?;
    fixture.stop_domain().await?;
    let client = fixture.broker.client().clone();
    let bob = PartitionKeys::new(CATEGORY, "bob", "backfill");
    let halt = bob.halt(common::PROJECTOR);
    // Back to the old layout: bob's halt listed in the shared set only, with
    // a halt resolved since that the old set still lists.
    let _: Value = client.srem(bob.halted(), &halt).await?;
    let _: Value = client.del(bob.halted_directory()).await?;
    let legacy = legacy_halted(&bob);
    let gone = PartitionKeys::new(CATEGORY, "gone", "backfill").halt(common::PROJECTOR);
    let _: Value = client.sadd(&legacy, vec![halt.clone(), gone]).await?;
    let slot = i64::from(bob.slot());
    let _: Value = client.sadd(LEGACY_DIRECTORY, slot).await?;
    for name in [OLD_LIBRARY, APP_LIBRARY] {
        let _: Value = client.function_load(false, library_code(name)).await?;
    }
    let status = fixture
        .ordo(&["status", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(status["halted"], serde_json::json!([]), "the old set is not read");

    let report = fixture.ordo(&["setup", "--json"]).await?.expect_code(0)?.json()?;
    assert_eq!(report["library"], ordo_redis::setup::library_name());
    assert_eq!(report["primaries"], 1);
    assert_eq!(report["other_libraries"], serde_json::json!([OLD_LIBRARY]));
    assert_eq!(report["deleted_libraries"], serde_json::json!([]));
    assert_eq!(report["halts_moved"], 1, "bob's, not the one resolved since");
    let status = fixture
        .ordo(&["status", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    let halted = status["halted"].as_array().expect("halts");
    assert_eq!(halted.len(), 1, "{status:#}");
    assert_eq!(halted[0]["key"], "bob", "{status:#}");
    assert!(
        !client.exists::<bool, _>(&legacy).await?,
        "the old bucket is gone"
    );
    assert!(
        !client.exists::<bool, _>(LEGACY_DIRECTORY).await?,
        "and its directory"
    );
    // The operator resolves the moved halt as any other.
    fixture.cure();
    fixture
        .ordo(&["retry", CATEGORY, "bob", "--yes"])
        .await?
        .expect_code(0)?;

    let text = fixture.ordo(&["setup"]).await?.expect_code(0)?;
    text.expect_stdout(&format!(
        "libraries of other releases still loaded: {OLD_LIBRARY} (once no process of those releases runs: \
         `ordo setup --delete-old-libraries`)"
    ))?;
    let report = fixture
        .ordo(&["setup", "--delete-old-libraries", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(report["deleted_libraries"], serde_json::json!([OLD_LIBRARY]));
    assert_eq!(report["halts_moved"], 0);
    let loaded = libraries(&fixture).await?;
    assert!(!loaded.contains(OLD_LIBRARY), "{loaded}");
    assert!(
        loaded.contains(APP_LIBRARY) && loaded.contains(ordo_redis::setup::library_name()),
        "{loaded}"
    );
    fixture.stop().await
}
