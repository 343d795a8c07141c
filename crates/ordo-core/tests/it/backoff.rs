//! The capped, jittered exponential backoff.

use std::collections::HashSet;
use std::time::Duration;

use ordo_core::{Backoff, BackoffError};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn invalid_bounds_are_rejected() {
    assert_eq!(
        Backoff::new(Duration::ZERO, ms(10)),
        Err(BackoffError::ZeroInitial)
    );
    assert_eq!(
        Backoff::new(ms(100), ms(50)),
        Err(BackoffError::MaxBelowInitial {
            initial: ms(100),
            max: ms(50)
        })
    );
    assert!(Backoff::new(ms(100), ms(100)).is_ok());
}

#[test]
fn steps_double_and_stop_at_the_cap() {
    let backoff = Backoff::new(ms(100), ms(1000)).unwrap();
    let steps: Vec<Duration> = (0..=6).map(|attempt| backoff.ceiling(attempt)).collect();
    assert_eq!(
        steps,
        vec![ms(100), ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
    );
    assert_eq!(
        backoff.ceiling(u32::MAX),
        ms(1000),
        "no overflow on huge attempts"
    );
}

#[test]
fn delays_are_jittered_within_the_upper_half_of_each_step() {
    let backoff = Backoff::new(ms(100), ms(1000)).unwrap();
    for attempt in 1..=8 {
        let ceiling = backoff.ceiling(attempt);
        let delays: Vec<Duration> = (0..200).map(|_| backoff.delay(attempt)).collect();
        for delay in &delays {
            assert!(
                *delay >= ceiling / 2 && *delay <= ceiling,
                "attempt {attempt}: {delay:?}"
            );
        }
        let distinct: HashSet<&Duration> = delays.iter().collect();
        assert!(
            distinct.len() > 100,
            "attempt {attempt}: only {} distinct delays",
            distinct.len()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn sleep_waits_the_jittered_delay() {
    let backoff = Backoff::new(ms(100), ms(5000)).unwrap();
    let start = tokio::time::Instant::now();
    backoff.sleep(3).await;
    let waited = start.elapsed();
    assert!(waited >= ms(200) && waited <= ms(401), "waited {waited:?}");
}
