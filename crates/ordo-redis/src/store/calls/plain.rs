//! A plain (unpartitioned) consumer's scripts: `ack_plain.lua` and
//! `claim_plain.lua`.

use std::time::Duration;

use fred::interfaces::{FunctionInterface, SortedSetsInterface};
use fred::types::Value;

use super::millis;
use crate::error::Result;
use crate::store::keys::instances;
use crate::store::scripts::SCRIPTS;

/// `ack_plain.lua`: acknowledges entry `id` of `stream` for `group`.
pub(crate) async fn ack<C>(client: &C, stream: &str, group: &str, id: &str) -> Result<()>
where
    C: FunctionInterface + Send + Sync,
{
    SCRIPTS
        .ack_plain
        .run(
            client,
            vec![stream.to_owned()],
            vec![Value::from(group), Value::from(id)],
        )
        .await?;
    Ok(())
}

/// `claim_plain.lua`: claims for `instance` up to `count` entries of
/// `stream` pending for `group` on instances whose announcement lapsed;
/// a consumer with nothing pending and idle longer than `forget` is
/// removed from the group. The group's instance set is read first and
/// passed in (on Redis Cluster it lives in another slot than the stream).
pub(crate) async fn claim<C>(
    client: &C,
    stream: &str,
    group: &str,
    instance: &str,
    count: i64,
    forget: Duration,
) -> Result<()>
where
    C: FunctionInterface + SortedSetsInterface + Send + Sync,
{
    let announced: Vec<(String, f64)> = client
        .zrange(instances(group), 0, -1, None, false, None, true)
        .await?;
    let mut args = vec![
        Value::from(group),
        Value::from(instance),
        Value::from(count),
        millis(forget),
    ];
    for (name, expiry) in announced {
        args.push(Value::from(name));
        args.push(Value::from(expiry));
    }
    SCRIPTS
        .claim_plain
        .run(client, vec![stream.to_owned()], args)
        .await?;
    Ok(())
}
