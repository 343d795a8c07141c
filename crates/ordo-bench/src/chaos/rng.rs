//! A tiny seeded PRNG (SplitMix64): the fault schedule and the events' work
//! must replay from `--seed` alone, and no dependency is worth that little.

use std::time::Duration;

/// SplitMix64 (Steele, Lea and Flood): 64 bits of state, statistically fine
/// for choosing faults, trivially reproducible.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    /// A generator seeded with `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// An independent generator for another purpose, derived from `seed` and
    /// `stream`, so adding draws to one purpose does not shift another's.
    pub(crate) fn derived(seed: u64, stream: u64) -> Self {
        Self::new(Self::new(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F)).next_u64())
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0); the modulo bias is irrelevant
    /// for the small bounds used here.
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0, "an empty range");
        self.next_u64() % bound.max(1)
    }

    /// A number in `low..=high`.
    pub(crate) fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low).saturating_add(1))
    }

    /// A duration uniformly in `low..=high` (millisecond resolution).
    pub(crate) fn duration(&mut self, low: Duration, high: Duration) -> Duration {
        let (low, high) = (millis(low), millis(high));
        Duration::from_millis(self.between(low, high.max(low)))
    }

    /// `true` with probability `percent` / 100.
    pub(crate) fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One element of `items` (`None` when empty).
    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        let index = usize::try_from(self.below(items.len() as u64)).unwrap_or(0);
        items.get(index)
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = usize::try_from(self.below(i as u64 + 1)).unwrap_or(0);
            items.swap(i, j);
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sequence_and_another_seed_another() {
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
        // The reference SplitMix64 output for seed 0.
        assert_eq!(Rng::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn derived_streams_differ_from_each_other() {
        assert_ne!(Rng::derived(7, 1).next_u64(), Rng::derived(7, 2).next_u64());
        assert_eq!(Rng::derived(7, 1).next_u64(), Rng::derived(7, 1).next_u64());
    }

    #[test]
    fn draws_stay_in_their_ranges() {
        let mut rng = Rng::new(1);
        for _ in 0..1_000 {
            assert!((3..=5).contains(&rng.between(3, 5)));
            let d = rng.duration(Duration::from_millis(10), Duration::from_millis(20));
            assert!((10..=20).contains(&d.as_millis()));
        }
        assert!(!(0..100).any(|_| rng.percent(0)));
        assert!((0..100).all(|_| rng.percent(100)));
        assert_eq!(rng.pick::<u8>(&[]), None);
    }

    #[test]
    fn a_shuffle_is_a_permutation() {
        let mut items: Vec<u32> = (0..20).collect();
        Rng::new(9).shuffle(&mut items);
        let mut sorted = items.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>());
        assert_ne!(items, sorted);
    }
}
