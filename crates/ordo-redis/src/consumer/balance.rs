//! Fair share: how many of a group's units this instance should own.
//!
//! Every live instance computes the same split from the same inputs: `n`
//! units over `k` instances gives each `n / k`, and the `n % k` instances
//! ranked first get one more, so the targets add up to exactly `n` (a
//! ceiling for everyone would let early instances keep more than their
//! share for good). The ranking is rotated per group so that, over many
//! groups, the extra units do not always land on the same instance.

use std::hash::{DefaultHasher, Hash, Hasher};

/// This instance's target for a group with `units` units, given the live
/// instances (`me` among them).
pub(crate) fn target(units: usize, instances: &[String], me: &str, group: &str) -> usize {
    let mut live: Vec<&str> = instances.iter().map(String::as_str).collect();
    if !live.contains(&me) {
        live.push(me);
    }
    live.sort_unstable();
    live.dedup();
    let count = live.len();
    let position = live.iter().position(|i| *i == me).unwrap_or(0);
    let rank = (position + count - stable_hash(group) % count) % count;
    units / count + usize::from(rank < units % count)
}

/// Each group's target within an instance's limit on the units it owns
/// over all its groups (`max_owned_partitions`; `None`: no limit), given
/// each group's fair share (`fair`, in the groups' order): the limit split
/// evenly over the groups, a group that needs less than an even part
/// leaving the rest to the others (water-filling), never more than a
/// group's fair share. The units left over are for other instances (their
/// shares do not grow: they wait until an instance has room).
pub(crate) fn within_limit(fair: &[usize], limit: Option<usize>) -> Vec<usize> {
    let Some(limit) = limit else {
        return fair.to_vec();
    };
    let mut order: Vec<usize> = (0..fair.len()).collect();
    order.sort_by_key(|&group| fair[group]);
    let mut allowed = vec![0; fair.len()];
    let mut left = limit;
    for (done, &group) in order.iter().enumerate() {
        let even = left / (fair.len() - done);
        allowed[group] = fair[group].min(even);
        left -= allowed[group];
    }
    allowed
}

/// The order in which this instance tries to acquire `candidates`: a
/// per-instance permutation, so instances that start together contend for
/// different units rather than all for the first ones.
pub(crate) fn preference_order<T>(candidates: &mut [T], instance: &str, id: impl Fn(&T) -> &str) {
    candidates.sort_by_cached_key(|c| {
        let mut hasher = DefaultHasher::new();
        instance.hash(&mut hasher);
        id(c).hash(&mut hasher);
        hasher.finish()
    });
}

/// FNV-1a: the same in every process and every build, so instances running
/// different versions during an upgrade still agree on the ranking.
fn stable_hash(text: &str) -> usize {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    // Only the value modulo a small count matters.
    usize::try_from(hash % 1_000_003).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("instance-{i}")).collect()
    }

    #[test]
    fn targets_add_up_to_the_units() {
        for count in 1..6 {
            let instances = ids(count);
            for units in 0..40 {
                for group in ["a", "b", "Projector"] {
                    let total: usize = instances
                        .iter()
                        .map(|me| target(units, &instances, me, group))
                        .sum();
                    assert_eq!(
                        total, units,
                        "{units} units over {count} instances, group {group}"
                    );
                }
            }
        }
    }

    #[test]
    fn targets_differ_by_at_most_one() {
        let instances = ids(3);
        let targets: Vec<usize> = instances
            .iter()
            .map(|me| target(10, &instances, me, "g"))
            .collect();
        assert_eq!(targets.iter().max().unwrap() - targets.iter().min().unwrap(), 1);
    }

    #[test]
    fn an_instance_missing_from_the_list_counts_itself() {
        assert_eq!(target(10, &[], "me", "g"), 10);
        assert_eq!(target(10, &["other".to_owned()], "me", "g"), 5);
    }

    #[test]
    fn a_limit_is_shared_by_the_groups_and_never_exceeded() {
        assert_eq!(within_limit(&[40, 3, 10], None), [40, 3, 10]);
        assert_eq!(within_limit(&[40, 3, 10], Some(100)), [40, 3, 10]);
        // 20 over three groups: the small one takes its 3, the others
        // split the 17 left (8 and 9, the larger share last).
        assert_eq!(within_limit(&[40, 3, 10], Some(20)), [9, 3, 8]);
        assert_eq!(within_limit(&[5, 5], Some(1)), [0, 1]);
        assert_eq!(within_limit(&[], Some(5)), Vec::<usize>::new());
        for limit in 0..30 {
            for fair in [vec![7, 0, 12], vec![1, 1, 1, 1], vec![30]] {
                let allowed = within_limit(&fair, Some(limit));
                let total: usize = allowed.iter().sum();
                assert_eq!(total, limit.min(fair.iter().sum()), "{fair:?} within {limit}");
                assert!(allowed.iter().zip(&fair).all(|(a, f)| a <= f));
            }
        }
    }

    #[test]
    fn preference_orders_differ_between_instances() {
        let mut a: Vec<String> = ids(20);
        let mut b = a.clone();
        preference_order(&mut a, "one", String::as_str);
        preference_order(&mut b, "two", String::as_str);
        assert_ne!(a, b);
    }
}
