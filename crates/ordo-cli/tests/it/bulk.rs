//! `ordo retry | skip | dlq --all [filters]`: one decision for every
//! matching halted partition, with `--dry-run`, the confirmation rule of
//! the single action, a summary, and exit codes.

use crate::common;

use common::{CATEGORY, Fixture, PROJECTOR, WAIT};
use ordo_testkit::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_actions_filter_confirm_and_summarise() -> anyhow::Result<()> {
    let fixture = Fixture::start_halting(&["alice", "bob", "carol", "dave"]).await?;

    // A dry run lists every match and changes nothing.
    let dry = fixture
        .ordo(&["retry", "--all", "--dry-run"])
        .await?
        .expect_code(0)?;
    dry.expect_stdout("dry run: would retry 4 halted partitions (nothing changed)")?;
    for client in ["alice", "bob", "carol", "dave"] {
        dry.expect_stdout(&format!("{client}-1 cannot be projected"))?;
    }
    let dry = fixture
        .ordo(&[
            "skip",
            "--all",
            "--dry-run",
            "--json",
            "--error-matches",
            "order (alice|bob)-",
        ])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(dry["matched"], 2);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(fixture.halted().await?.len(), 4, "a dry run changed something");

    // The confirmation rule of the single action: a script passes --yes.
    fixture
        .ordo(&["retry", "--all"])
        .await?
        .expect_code(3)?
        .expect_stderr("stdin is not a terminal")?;
    assert_eq!(
        fixture.halted().await?.len(),
        4,
        "an unconfirmed action changed something"
    );

    // Filters: nothing halted before an hour ago; a handler that has no halt.
    fixture
        .ordo(&["dlq", "--all", "--halted-before", "1h", "--yes"])
        .await?
        .expect_code(0)?
        .expect_stdout("no halted partition matches: nothing to dlq")?;
    fixture
        .ordo(&["dlq", "--all", "--handler", "Nobody", "--yes"])
        .await?
        .expect_code(0)?
        .expect_stdout("no halted partition matches")?;

    // Skip bob's head only (by its error), dead-letter alice's (by error and category).
    let skipped = fixture
        .ordo(&[
            "skip",
            "--all",
            "--error-matches",
            "order bob-1 ",
            "--yes",
            "--json",
        ])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(
        (skipped["matched"].as_u64(), skipped["done"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(skipped["keys"][0]["key"], "bob");
    assert_eq!(skipped["keys"][0]["outcome"], "done");
    let moved = fixture
        .ordo(&[
            "dlq",
            "--all",
            "--category",
            CATEGORY,
            "--handler",
            PROJECTOR,
            "--error-matches",
            "alice",
            "--yes",
        ])
        .await?
        .expect_code(0)?;
    moved.expect_stdout("order:alice (OrderProjector) entry")?;
    moved.expect_stdout("dlq of 1 halted partition: 1 dead-lettered, 0 refused, 0 failed")?;
    eventually(WAIT, "bob's and alice's later orders", || async {
        Ok(fixture.handled_of("bob") == ["bob-2"] && fixture.handled_of("alice") == ["alice-2"])
    })
    .await?;

    // The cause is fixed: retry everything left, in order.
    fixture.cure();
    let retried = fixture
        .ordo(&["retry", "--all", "--yes", "--halted-before", "0s"])
        .await?
        .expect_code(0)?;
    retried.expect_stdout("retry of 2 halted partitions: 2 retried, 0 refused, 0 failed")?;
    eventually(WAIT, "carol's and dave's orders", || async {
        Ok(fixture.handled_of("carol") == ["carol-1", "carol-2"]
            && fixture.handled_of("dave") == ["dave-1", "dave-2"])
    })
    .await?;
    assert!(fixture.halted().await?.is_empty());
    fixture
        .ordo(&["retry", "--all", "--yes"])
        .await?
        .expect_code(0)?
        .expect_stdout("no halted partition matches")?;
    fixture.stop().await
}
