//! The consumer's own scripts, outside any lease: `announce.lua` (live
//! instances), `arm.lua` and `recheck.lua` (doorbells), `pause.lua` (a
//! paused handler's record).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::{ClientLike, FunctionInterface, StreamsInterface};
use fred::types::Value;

use super::millis;
use crate::error::{Error, Result};
use crate::store::keys::{CONSUMER, instances, paused};
use crate::store::scripts::{SCRIPTS, array};

/// `announce.lua`: announces `instance` to every group of `groups`, for
/// `ttl`; returns each group's live instances. On a single Redis one call
/// announces to every group; on Redis Cluster one call per group (each
/// group's instance set is in a slot of its own, and a call touches one),
/// the calls sent at once.
pub(crate) async fn announce(
    client: &Pool,
    groups: &[&str],
    instance: &str,
    ttl: Duration,
) -> Result<Vec<Vec<String>>> {
    let args = vec![Value::from(instance), millis(ttl)];
    if !client.next().is_clustered() {
        let keys = groups.iter().map(|group| instances(group)).collect();
        let reply = SCRIPTS.announce.run(client, keys, args).await?;
        return Ok(array(reply).into_iter().map(live_instances).collect());
    }
    let calls = groups.iter().map(|group| {
        let args = args.clone();
        async move {
            let reply = SCRIPTS.announce.run(client, vec![instances(group)], args).await?;
            Ok::<_, Error>(
                array(reply)
                    .into_iter()
                    .next()
                    .map(live_instances)
                    .unwrap_or_default(),
            )
        }
    });
    futures_util::future::try_join_all(calls).await
}

/// The instance ids of one group's reply.
fn live_instances(members: Value) -> Vec<String> {
    array(members)
        .into_iter()
        .filter_map(|m| m.as_str().map(|s| s.into_owned()))
        .collect()
}

/// `arm.lua`: arms the doorbell `doorbell` of a partition whose lanes are
/// `lanes` (name, the last id its worker read) for a worker of `group`;
/// `read`: the worker read the partition. True when a lane has an entry
/// after the worker's read or the partition was retired since (the doorbell
/// is then left unarmed). Once armed, a lane with nothing pending in
/// `group` drops the group's consumer (the next read creates it again).
pub(crate) async fn arm<C>(
    client: &C,
    doorbell: &str,
    group: &str,
    read: bool,
    lanes: &[(String, String)],
) -> Result<bool>
where
    C: FunctionInterface + Send + Sync,
{
    let mut keys = Vec::with_capacity(1 + lanes.len());
    keys.push(doorbell.to_owned());
    let mut args = Vec::with_capacity(3 + lanes.len());
    args.push(Value::from(if read { "1" } else { "0" }));
    for (lane, id) in lanes {
        keys.push(lane.clone());
        args.push(Value::from(id.as_str()));
    }
    args.push(Value::from(group));
    args.push(Value::from(CONSUMER));
    let reply = SCRIPTS.arm.run(client, keys, args).await?;
    Ok(reply.as_i64() == Some(1))
}

/// For each partition of `bells` (its lanes: name, the last id its worker
/// read; all served by the node `routing`, a name in the first one's slot,
/// routes to), whether a lane has an entry after it. On a single Redis a
/// non-blocking `XREAD` per [`RECHECK_LANES`] lanes answers for all of them
/// (a lane with an entry after the given id is in its reply, the others
/// are not), sent as it is, no script around it; on a Redis Cluster node,
/// where a command keeps to one slot, `recheck.lua` reads one lane per
/// `XREAD`, in one call.
pub(crate) async fn recheck<C>(client: &C, routing: &str, bells: &[&[(String, String)]]) -> Result<Vec<bool>>
where
    C: FunctionInterface + StreamsInterface + Send + Sync,
{
    if bells.is_empty() {
        return Ok(Vec::new());
    }
    if !client.is_clustered() {
        return recheck_by_xread(client, bells).await;
    }
    let keys = vec![routing.to_owned()];
    let mut args = Vec::with_capacity(bells.len() * 5);
    for lanes in bells {
        args.push(Value::from(i64::try_from(lanes.len()).unwrap_or(i64::MAX)));
        for (lane, id) in lanes.iter() {
            args.push(Value::from(lane.as_str()));
            args.push(Value::from(id.as_str()));
        }
    }
    let script = &SCRIPTS.recheck;
    let mut found = vec![false; bells.len()];
    for position in array(script.run(client, keys, args).await?) {
        let position = position
            .as_u64()
            .and_then(|p| usize::try_from(p).ok())
            .and_then(|p| p.checked_sub(1))
            .filter(|&p| p < found.len())
            .ok_or_else(|| Error::protocol(script.name(), "a position that is not one of the call's"))?;
        found[position] = true;
    }
    Ok(found)
}

/// The most lanes one re-check `XREAD` names.
const RECHECK_LANES: usize = 1_000;

/// [`recheck`] on a single Redis: one `XREAD COUNT 1 STREAMS <lanes> <ids>`
/// per chunk of lanes. A chunk names a lane once (`XREAD` answers a stream
/// once): two groups' workers of one partition read it up to different
/// ids, so the second starts another chunk.
async fn recheck_by_xread<C>(client: &C, bells: &[&[(String, String)]]) -> Result<Vec<bool>>
where
    C: StreamsInterface + Send + Sync,
{
    let mut found = vec![false; bells.len()];
    let capacity = RECHECK_LANES.min(2 * bells.len());
    let mut chunk: Vec<(&str, &str, usize)> = Vec::with_capacity(capacity);
    let mut named: HashSet<&str> = HashSet::with_capacity(capacity);
    for (position, lanes) in bells.iter().enumerate() {
        for (lane, id) in lanes.iter() {
            if chunk.len() == RECHECK_LANES || named.contains(lane.as_str()) {
                read_chunk(client, &chunk, &mut found).await?;
                chunk.clear();
                named.clear();
            }
            chunk.push((lane.as_str(), id.as_str(), position));
            named.insert(lane.as_str());
        }
    }
    read_chunk(client, &chunk, &mut found).await?;
    Ok(found)
}

/// One `XREAD` of `chunk` (lane, id, the partition's position): marks in
/// `found` the partitions of the lanes with an entry after their id.
async fn read_chunk<C>(client: &C, chunk: &[(&str, &str, usize)], found: &mut [bool]) -> Result<()>
where
    C: StreamsInterface + Send + Sync,
{
    if chunk.is_empty() {
        return Ok(());
    }
    let lanes: Vec<&str> = chunk.iter().map(|(lane, ..)| *lane).collect();
    let ids: Vec<&str> = chunk.iter().map(|(_, id, _)| *id).collect();
    let reply: Value = client.xread(Some(1), None, lanes, ids).await?;
    // RESP2: [[lane, entries]...]; RESP3: {lane: entries}; nil: no news.
    let named: Vec<Option<String>> = match reply {
        Value::Null => Vec::new(),
        Value::Map(map) => map.inner().into_keys().map(|lane| lane.into_string()).collect(),
        Value::Array(streams) => streams
            .into_iter()
            .map(|stream| match stream {
                Value::Array(pair) => pair.into_iter().next().and_then(Value::into_string),
                _ => None,
            })
            .collect(),
        other => {
            return Err(Error::protocol(
                "XREAD",
                format!("an unexpected reply: {other:?}"),
            ));
        }
    };
    if named.is_empty() {
        return Ok(());
    }
    let positions: HashMap<&str, usize> = chunk
        .iter()
        .map(|(lane, _, position)| (*lane, *position))
        .collect();
    for lane in named {
        let lane = lane.ok_or_else(|| Error::protocol("XREAD", "a stream without a text name"))?;
        let position = positions
            .get(lane.as_str())
            .ok_or_else(|| Error::protocol("XREAD", format!("a stream it was not asked for: {lane}")))?;
        found[*position] = true;
    }
    Ok(())
}

/// `pause.lua`: writes `record` (empty: clears it) as `instance`'s pause
/// of `group`, valid for `ttl` unless written again.
pub(crate) async fn pause<C>(
    client: &C,
    group: &str,
    instance: &str,
    record: &str,
    ttl: Duration,
) -> Result<()>
where
    C: FunctionInterface + Send + Sync,
{
    SCRIPTS
        .pause
        .run(
            client,
            vec![paused(group)],
            vec![Value::from(instance), Value::from(record), millis(ttl)],
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use fred::clients::Pool;
    use fred::interfaces::StreamsInterface;
    use ordo_testkit::{Redis, RedisCluster};

    use super::*;
    use crate::net::connection::test_pool;

    /// 1,500 partitions of two lanes (the second never written), so a
    /// single Redis reads them in three chunks of 1,000 lanes; news on
    /// either side of each chunk's end; and two more workers of two of
    /// those partitions (two groups') naming the same lane up to other ids,
    /// behind and up to date in both orders. The re-check answers exactly
    /// the partitions with an entry after their id. Every lane sits in one
    /// slot, so one call reads them on a Redis Cluster too (a lane per
    /// `XREAD` there).
    async fn the_recheck_answers_exactly_the_partitions_with_news(client: &Pool) {
        let lane = |i: usize| format!("{{recheck-chunks}}:lane:{i}");
        let mut last = Vec::new();
        for i in 0..1500 {
            let id: String = client
                .xadd(lane(i), false, None::<()>, "*", ("f", "v"))
                .await
                .unwrap();
            last.push(id);
        }
        let news = [0usize, 499, 500, 501, 999, 1000, 1499];
        let mut bells: Vec<Vec<(String, String)>> = (0..1500)
            .map(|i| {
                let read_up_to = if news.contains(&i) {
                    "0-1".to_owned()
                } else {
                    last[i].clone()
                };
                vec![
                    (lane(i), read_up_to),
                    (format!("{}:backfill", lane(i)), "0-0".to_owned()),
                ]
            })
            .collect();
        bells.push(vec![(lane(10), last[10].clone())]);
        bells.push(vec![(lane(10), "0-1".to_owned())]);
        bells.push(vec![(lane(11), "0-1".to_owned())]);
        bells.push(vec![(lane(11), last[11].clone())]);
        let bells: Vec<&[(String, String)]> = bells.iter().map(Vec::as_slice).collect();
        let found = recheck(client.next(), &lane(0), &bells).await.unwrap();
        let positions: Vec<usize> = (0..found.len()).filter(|&i| found[i]).collect();
        let mut expected = news.to_vec();
        expected.extend([1501, 1502]);
        assert_eq!(positions, expected);
    }

    #[tokio::test]
    async fn the_recheck_answers_exactly_the_partitions_with_news_on_a_single_redis() {
        let redis = Redis::start().unwrap();
        the_recheck_answers_exactly_the_partitions_with_news(&test_pool(&redis.url(), 1).await).await;
    }

    #[tokio::test]
    async fn the_recheck_answers_exactly_the_partitions_with_news_on_a_cluster() {
        let cluster = RedisCluster::start_local().unwrap();
        the_recheck_answers_exactly_the_partitions_with_news(&test_pool(&cluster.url(), 1).await).await;
    }
}
