//! `ClusterStatus` (the queries behind `ordo status` and `ordo partitions`)
//! on a real Redis, where Redis itself cannot tell a group's lag.

use crate::common;

use common::noted;
use fred::interfaces::StreamsInterface;
use fred::types::Value;
use ordo_core::contract::broker::{Broker, Publication};
use ordo_redis::{ClusterStatus, RedisBroker};
use ordo_testkit::Redis;

/// The `lag` field of `group` in an `XINFO GROUPS` reply.
fn reported_lag(groups: Value, group: &str) -> Value {
    let fields = groups
        .into_array()
        .into_iter()
        .map(Value::into_array)
        .find(|fields| fields.get(1).and_then(Value::as_str).as_deref() == Some(group))
        .expect("the group");
    let at = fields
        .iter()
        .position(|v| v.as_str().as_deref() == Some("lag"))
        .expect("a lag field");
    fields[at + 1].clone()
}

#[tokio::test]
async fn lag_is_counted_when_redis_cannot_tell_it() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let broker = RedisBroker::builder(redis.url()).build().await?;
    let stream = ordo_redis::PartitionKeys::new("audit", "k", "backfill")
        .primary()
        .to_owned();
    let publications: Vec<Publication> = (1..=4).map(|seq| noted("audit", "k", seq)).collect();
    broker.publish(&publications).await?;
    let client = broker.client();
    let _: Value = client.xgroup_create(&stream, "Auditor", "0", false).await?;
    let status = ClusterStatus::new(client.clone(), "backfill");
    let groups = ["Auditor".to_owned()];
    assert_eq!(status.partitions("audit", &groups).await?[0].groups[0].lag, 4);

    // An entry deleted by hand: Redis can no longer tell the lag.
    let ids: Value = client.xrange(&stream, "-", "+", None).await?;
    let second = ids.into_array()[1].clone().into_array()[0]
        .as_str()
        .expect("an id")
        .into_owned();
    let _: i64 = client.xdel(&stream, second.as_str()).await?;
    assert!(reported_lag(client.xinfo_groups(&stream).await?, "Auditor").is_null());

    let partitions = status.partitions("audit", &groups).await?;
    assert_eq!(partitions.len(), 1);
    assert_eq!(partitions[0].key, "k");
    assert_eq!(partitions[0].groups[0].lag, 3, "the entries left are counted");
    assert_eq!(partitions[0].groups[0].pending, 0);
    assert!(partitions[0].groups[0].owner.is_none());
    assert_eq!(partitions[0].lanes[0].length, 3);
    assert!(status.categories().await?.contains(&"audit".to_owned()));
    Ok(())
}
