//! `RunningDomain::health()` and `ordo status --check` agree, on a real Redis.

use crate::common;

use std::collections::BTreeMap;

use common::{AUDITOR, Fixture, OrderPlaced, PROJECTOR, WAIT};
use ordo_core::Envelope;
use ordo_core::contract::broker::{Broker, Publication};
use ordo_core::contract::key::Lane;
use ordo_testkit::eventually;
use serde_json::Value;

/// (state, reasons) per group, as `ordo status --json` reports them.
fn cli_health(status: &Value) -> BTreeMap<String, (String, Vec<String>)> {
    status["health"]
        .as_array()
        .expect("status --json has a health list")
        .iter()
        .map(|group| {
            let reasons = group["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap().to_owned())
                .collect();
            (
                group["handler"].as_str().unwrap().to_owned(),
                (group["state"].as_str().unwrap().to_owned(), reasons),
            )
        })
        .collect()
}

/// (state, reasons) per subscription, as `RunningDomain::health()` reports them.
async fn domain_health(fixture: &Fixture) -> BTreeMap<String, (String, Vec<String>)> {
    fixture
        .health()
        .await
        .subscriptions
        .into_iter()
        .map(|s| (s.handler, (s.state.to_string(), s.reasons)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halted_partition_is_halted_for_both_health_and_status_check() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, true).await?;
    let status = fixture
        .ordo(&["status", "--check", "--json"])
        .await?
        .expect_code(4)?;
    let cli = cli_health(&status.json()?);
    let domain = domain_health(&fixture).await;
    assert_eq!(
        cli, domain,
        "ordo status --check and RunningDomain::health() disagree"
    );
    let (state, reasons) = &domain[PROJECTOR];
    assert_eq!(state, "halted");
    assert!(
        reasons[0].starts_with("partition `order:bob` halted on entry ")
            && reasons[0].ends_with("poison order b-1 cannot be projected"),
        "{reasons:?}"
    );
    assert_eq!(domain[AUDITOR], ("ok".to_owned(), Vec::new()));
    let report = fixture.health().await;
    assert!(
        report.live() && report.ready(),
        "a halt needs an operator, not a restart"
    );

    // Resolved: both say ok again.
    fixture.cure();
    fixture
        .ordo(&["retry", "order", "bob", "--group", PROJECTOR, "-y"])
        .await?
        .expect_code(0)?;
    eventually(WAIT, "bob to drain", || async {
        Ok(fixture.handled_of("bob").len() == 3)
    })
    .await?;
    eventually(WAIT, "the projector's health to be ok", || async {
        Ok(domain_health(&fixture).await[PROJECTOR].0 == "ok")
    })
    .await?;
    let status = fixture
        .ordo(&["status", "--check", "--json"])
        .await?
        .expect_code(0)?;
    assert_eq!(cli_health(&status.json()?), domain_health(&fixture).await);
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_over_the_threshold_is_lagging_with_a_warning() -> anyhow::Result<()> {
    let mut fixture = Fixture::start(false, true).await?;
    fixture.stop_domain().await?;
    // Two orders published while nobody consumes: a lag of 2 for each
    // group, over a max_lag of 1 in the tool's domain.toml.
    let publications: Vec<Publication> = ["a-4", "a-5"]
        .into_iter()
        .map(|id| {
            let mut envelope = Envelope::new(&OrderPlaced {
                order_id: id.to_owned(),
                client_id: "alice".to_owned(),
                poison: false,
            })
            .unwrap();
            envelope.partition_key = Some("alice".to_owned());
            Publication::to_partition("alice", Lane::Primary, envelope)
        })
        .collect();
    fixture.broker.publish(&publications).await?;
    std::fs::write(fixture.dir.path().join("domain.toml"), "[health]\nmax_lag = 1\n")?;
    let status = fixture
        .ordo(&["status", "--check", "--json"])
        .await?
        .expect_code(5)?;
    let json = status.json()?;
    let cli = cli_health(&json);
    for group in [PROJECTOR, AUDITOR] {
        let expected = (
            "lagging".to_owned(),
            vec!["2 entries not yet delivered, over [health] max_lag = 1".to_owned()],
        );
        assert_eq!(cli[group], expected, "{group}");
        assert!(
            json["warnings"]
                .to_string()
                .contains(&format!("consumer group `{group}` is lagging")),
            "{}",
            json["warnings"]
        );
    }
    let text = fixture.ordo(&["status", "--check"]).await?.expect_code(5)?;
    text.expect_stdout("is lagging")?;
    fixture.stop().await
}
