//! Parking the keys of a hashed partition: the fenced operations the owner
//! of a hashed partition uses when a message of one of its keys is poison.
//!
//! A parked key's poison message, and every later message of the key, move
//! out of the partition's lanes into the key's held stream
//! ([`PartitionKeys::held`]), in order; the other keys keep flowing and the
//! lanes can be trimmed past the parked key. An operator resolves the key
//! ([`PartitionAdmin::resolve_parked`](crate::PartitionAdmin::resolve_parked));
//! the owner then runs the held messages first, in order, before any newer
//! message of the key, and the key flows again once its held stream is
//! empty.

use fred::interfaces::{HashesInterface, SetsInterface};
use fred::types::Value;
use ordo_core::contract::key::Lane;

use crate::error::Result;
use crate::owner::partition::{HaltReason, Held, StreamEntry, parse_lane};
use crate::store::calls::parking::{self, Message, Park, Resolved};
use crate::store::keys::KeyNames;
use crate::store::scripts::RawEntry;

/// What the owner of a hashed partition finds of its parked keys when it
/// takes the partition over.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Parking {
    /// The keys parked on a poison message.
    pub(crate) parked: Vec<String>,
    /// The keys whose messages are held aside: the parked keys, and the
    /// resolved ones whose held messages have not all run yet.
    pub(crate) holding: Vec<String>,
}

/// The next held message of a resolved key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeldNext {
    /// The key is parked (again): nothing to run.
    Parked,
    /// Its next held message.
    Entry(StreamEntry),
    /// It holds nothing any more: it flows again.
    Done,
}

/// The fields of `entry` as published (text or bytes, as they were), to
/// be written again elsewhere: name, value, ...
fn fields(entry: &StreamEntry) -> Vec<Value> {
    field_pairs(entry)
        .into_iter()
        .flat_map(|(name, value)| [Value::from(name), value])
        .collect()
}

/// The fields of `entry` as published (text or bytes, as they were), to
/// be written again elsewhere.
pub(crate) fn field_pairs(entry: &StreamEntry) -> Vec<(&'static str, Value)> {
    ["type", "key", "envelope"]
        .into_iter()
        .filter_map(|name| entry.raw_field(name).map(|value| (name, value)))
        .collect()
}

/// A held message: read from a key's held stream, with the lane it came
/// from (its `lane` field).
pub(crate) fn held_entry(raw: RawEntry) -> Result<StreamEntry> {
    let lane = raw.field("lane").map_or(Ok(Lane::Primary), parse_lane)?;
    Ok(StreamEntry::from_raw(raw, lane))
}

impl<'a> Held<'a> {
    /// The arguments naming resolved `key` (its own names `own`) of this
    /// held partition, for the held-message scripts.
    fn resolved(self, key: &'a str, own: &'a KeyNames) -> Resolved<'a> {
        Resolved {
            fence: self.lease.fence(),
            partition: self.partition,
            group: self.group,
            key,
            own,
            sequence_ttl: self.partitions.sequence_ttl(),
        }
    }
}

impl Held<'_> {
    /// The parked and holding keys of `partition` for `group`.
    pub(crate) async fn parking(self) -> Result<Parking> {
        let Held {
            partitions,
            group,
            partition,
            ..
        } = self;
        let parked: Vec<String> = partitions.client().hkeys(partition.parked(group)).await?;
        let holding: Vec<String> = partitions.client().smembers(partition.holding(group)).await?;
        Ok(Parking { parked, holding })
    }

    /// Which of `keys` are still parked.
    pub(crate) async fn still_parked(self, keys: &[String]) -> Result<Vec<bool>> {
        let Held {
            partitions,
            group,
            partition,
            ..
        } = self;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let records: Vec<Option<String>> = partitions
            .client()
            .hmget(partition.parked(group), keys.to_vec())
            .await?;
        Ok(records.iter().map(Option::is_some).collect())
    }

    /// Parks `key` of hashed `partition` on `entry` (poison: `reason`)
    /// under the fence, closing attempt `attempt` in the key's sequence.
    /// `held`: the entry is one of the key's held messages already (a
    /// resolved key's message failed again). Returns the held id of the
    /// parked head.
    pub(crate) async fn park(
        self,
        key: &str,
        own: &KeyNames,
        entry: &StreamEntry,
        held: bool,
        reason: &HaltReason,
        attempt: u64,
    ) -> Result<String> {
        let Held {
            partitions,
            lease,
            group,
            partition,
        } = self;
        self.list_halted_bucket().await?;
        let fields = fields(entry);
        let park = Park {
            fence: lease.fence(),
            partition,
            group,
            key,
            own,
            message: Message {
                id: entry.id(),
                lane: entry.lane(),
                fields: &fields,
            },
            // Stored capped: a handler's error text may be megabytes.
            error: &ordo_core::contract::text::capped(
                &reason.error,
                ordo_core::contract::text::MAX_ERROR_TEXT,
            ),
            attempts: reason.attempts,
            instance: partitions.instance(),
            attempt,
            sequence_ttl: partitions.sequence_ttl(),
            held,
        };
        parking::park(partitions.client(), park).await
    }

    /// Moves `entries` of `key` (all of one lane) into the key's held
    /// stream, behind what it holds, under the fence.
    pub(crate) async fn hold(self, key: &str, lane: Lane, entries: &[&StreamEntry]) -> Result<()> {
        let Held {
            partitions,
            lease,
            group,
            partition,
        } = self;
        let messages: Vec<(&str, Vec<Value>)> =
            entries.iter().map(|entry| (entry.id(), fields(entry))).collect();
        parking::hold(
            partitions.client(),
            lease.fence(),
            partition,
            group,
            key,
            lane,
            &messages,
        )
        .await
    }

    /// The next held message of resolved `key`, under the fence (when it
    /// holds none any more, it stops holding, in the same step), as attempt
    /// `attempt` of the key (in its sequence, `own`).
    ///
    /// A call of an attempt closed already is refused by the script (a
    /// late copy of an earlier call). While its caller still waits for it,
    /// only an earlier copy of this same call can have closed `attempt`,
    /// by ending the holding: that refusal is [`HeldNext::Done`].
    pub(crate) async fn held_next(self, key: &str, own: &KeyNames, attempt: u64) -> Result<HeldNext> {
        let of = self.resolved(key, own);
        Ok(
            match parking::held(self.partitions.client(), of, attempt).await? {
                parking::Held::Parked => HeldNext::Parked,
                parking::Held::Done => HeldNext::Done,
                parking::Held::Entry(raw) => HeldNext::Entry(held_entry(raw)?),
            },
        )
    }

    /// The fenced acknowledgement of held message `id` of resolved `key`,
    /// closing attempt `attempt` (0: none) in the key's sequence, and
    /// taking what message `message_id` applied out of its commit marker.
    pub(crate) async fn ack_held(
        self,
        key: &str,
        own: &KeyNames,
        id: &str,
        attempt: u64,
        message_id: Option<&str>,
    ) -> Result<()> {
        let of = self.resolved(key, own);
        parking::ack_held(self.partitions.client(), of, id, attempt, message_id).await
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use fred::interfaces::{SetsInterface, StreamsInterface};
    use ordo_core::contract::config::{Config, Partitions as Partitioning};
    use ordo_testkit::Redis;

    use super::*;
    use crate::ops::admin::PartitionAdmin;
    use crate::owner::partition::{Partitions, ReadOutcome};
    use crate::store::groups::{self, IfNoStream};
    use crate::store::keys::{PartitionId, PartitionKeys, Routing};

    const GROUP: &str = "G";
    const CATEGORY: &str = "late";

    /// A held-next call delayed on its connection past the client's timeout
    /// lands after the client asked again, ran the held message and
    /// acknowledged it, while the owner moves the key's next message into
    /// the held stream (issue 26.8). The late copy must change nothing: the
    /// key stays listed as holding, so the owner, or the next one after a
    /// lease loss, runs that message before the key flows again.
    #[tokio::test]
    async fn a_late_held_next_call_does_not_end_the_holding_of_a_key() {
        let redis = Redis::start().unwrap();
        let pool = crate::net::connection::test_pool(&redis.url(), 2).await;
        let partitions = Partitions::new(pool.clone(), "a", Duration::from_secs(60));
        let partition = PartitionKeys::of(PartitionId::hashed(CATEGORY, 0), "backfill");
        let own = partition.key_names(GROUP, "k");
        groups::create(&pool, partition.primary(), GROUP, IfNoStream::Create)
            .await
            .unwrap();
        for seq in 0..2 {
            let _: String = pool
                .xadd(
                    partition.primary(),
                    false,
                    None,
                    "*",
                    vec![
                        ("type", "T"),
                        ("key", "k"),
                        ("envelope", &format!("{{\"seq\":{seq}}}")),
                    ],
                )
                .await
                .unwrap();
        }
        let lease = partitions.acquire(GROUP, &partition).await.unwrap().unwrap();
        let read = partitions
            .read_hashed(&lease, GROUP, &partition, 10, &["0".to_owned(), "0".to_owned()])
            .await
            .unwrap();
        let ReadOutcome::Entries { entries, .. } = read else {
            panic!("the lane has two entries: {read:?}");
        };
        let [first, second] = <[StreamEntry; 2]>::try_from(entries).unwrap();

        // The first message is poison: the key parks (attempt 1), and an
        // operator retries it.
        let reason = HaltReason {
            lane: Lane::Primary,
            head: first.id().to_owned(),
            error: "poison".to_owned(),
            attempts: 1,
        };
        partitions
            .held(&lease, GROUP, &partition)
            .park("k", &own, &first, false, &reason, 1)
            .await
            .unwrap();
        let config = Config::default().with_partitions(CATEGORY, Partitioning::Hashed(NonZeroU32::MIN));
        PartitionAdmin::new(pool.clone(), "backfill")
            .with_routing(Routing::new(&config))
            .retry(GROUP, CATEGORY, "k")
            .await
            .unwrap();

        // Held-next, attempt 2: its first copy is delayed; the client asks
        // again, runs the held message and acknowledges it (closing the
        // attempts up to the last one numbered, 3: its handler's).
        let HeldNext::Entry(held) = partitions
            .held(&lease, GROUP, &partition)
            .held_next("k", &own, 2)
            .await
            .unwrap()
        else {
            panic!("the retried message is held");
        };
        assert_eq!(held.envelope_json(), first.envelope_json());
        partitions
            .held(&lease, GROUP, &partition)
            .ack_held("k", &own, held.id(), 3, None)
            .await
            .unwrap();

        // The delayed first copy lands now, with the held stream empty.
        partitions
            .held(&lease, GROUP, &partition)
            .held_next("k", &own, 2)
            .await
            .unwrap();
        // The key's next message reaches the owner, still holding: behind
        // what the key holds.
        partitions
            .held(&lease, GROUP, &partition)
            .hold("k", Lane::Primary, &[&second])
            .await
            .unwrap();

        let holding: bool = pool.sismember(partition.holding(GROUP), "k").await.unwrap();
        assert!(
            holding,
            "a late held-next call ended the holding: the key's next message sits in a held stream \
             no owner lists"
        );
        let parking = partitions
            .held(&lease, GROUP, &partition)
            .parking()
            .await
            .unwrap();
        assert_eq!(parking.holding, ["k"], "a new owner finds the key holding");
        let next = partitions
            .held(&lease, GROUP, &partition)
            .held_next("k", &own, 4)
            .await
            .unwrap();
        let HeldNext::Entry(next) = next else {
            panic!("the key's next message is held: {next:?}");
        };
        assert_eq!(next.envelope_json(), second.envelope_json());
    }
}
