//! Per-plugin client-side write cap: an optional token bucket (`governor`'s GCRA) in front of
//! every write a plugin makes (apply, patch, create, delete, status, events).
//!
//! Off by default: plugins share the API server through the host's fair write scheduler (seats
//! handed round the plugins with writes waiting), which never holds a plugin working alone. The
//! bucket is the operator's hard cap on a plugin (`limits.writeQps`, `--plugin-write-qps`), for a
//! noisy or untrusted one that should stay below a rate even when no other plugin writes.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::time::Instant;

/// Writes per second each plugin may make unless its config says otherwise: 0, no cap. Until
/// issue 30 this was 200/s, and it bound a plugin working alone to half controller-runtime's
/// speed against a fast API server (a cap that binds a plugin alone is not a fair share); the
/// fair write scheduler now shares the API server instead.
pub const DEFAULT_WRITE_QPS: u32 = 0;

/// Writes a capped plugin may make at once after being idle, before the rate applies: 0, twice
/// its rate (client-go's burst-to-rate ratio, 10 for 5/s).
pub const DEFAULT_WRITE_BURST: u32 = 0;

/// A plugin's write rate: `qps` tokens a second, at most `burst` saved up (0: twice `qps`).
/// `qps` 0 is no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRate {
    /// Writes per second; 0: unlimited.
    pub qps: u32,
    /// Most writes at once.
    pub burst: u32,
}

impl Default for WriteRate {
    fn default() -> Self {
        Self { qps: DEFAULT_WRITE_QPS, burst: DEFAULT_WRITE_BURST }
    }
}

/// governor's clock on tokio's time, so waits follow tokio's (virtual, in tests) clock.
#[derive(Clone, Debug)]
struct TokioClock(Instant);

impl Clock for TokioClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

type Bucket = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Duration>>;

/// One plugin version's write bucket.
#[derive(Debug)]
pub(crate) struct WriteLimiter {
    rate: WriteRate,
    bucket: Option<Bucket>,
    clock: TokioClock,
}

/// No token could be had before the call's deadline.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "client-side write rate limit: {qps} writes/s (burst {burst}) leaves no write before the reconcile deadline; the plugin writes faster than its limits.writeQps"
)]
pub(crate) struct Throttled {
    qps: u32,
    burst: u32,
}

impl WriteLimiter {
    pub(crate) fn new(rate: WriteRate) -> Self {
        let clock = TokioClock(Instant::now());
        let burst = if rate.burst == 0 { rate.qps.saturating_mul(2) } else { rate.burst };
        let rate = WriteRate { burst, ..rate };
        let bucket = NonZeroU32::new(rate.qps).map(|qps| {
            let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
            RateLimiter::direct_with_clock(Quota::per_second(qps).allow_burst(burst), clock.clone())
        });
        Self { rate, bucket, clock }
    }

    /// Takes a token if one is left now; never waits (for what may be dropped, like Events).
    pub(crate) fn try_acquire(&self) -> bool {
        self.bucket.as_ref().is_none_or(|bucket| bucket.check().is_ok())
    }

    /// Takes `n` tokens at once if the bucket has them now (a line of output takes one per
    /// byte); never waits.
    pub(crate) fn try_acquire_n(&self, n: usize) -> bool {
        let Some(n) = NonZeroU32::new(u32::try_from(n).unwrap_or(u32::MAX)) else { return true };
        self.bucket.as_ref().is_none_or(|bucket| matches!(bucket.check_n(n), Ok(Ok(()))))
    }

    /// Takes a token, waiting for one if none is left. Fails at once (as client-go's limiter
    /// does against a context deadline) if the next token comes only after `until`, and after
    /// waiting if other calls of the plugin took the tokens until then. Returns how long it
    /// slept for tokens.
    pub(crate) async fn acquire(&self, until: Instant) -> Result<Duration, Throttled> {
        let Some(bucket) = &self.bucket else { return Ok(Duration::ZERO) };
        let mut waited = Duration::ZERO;
        loop {
            let Err(not_until) = bucket.check() else { return Ok(waited) };
            let wait = not_until.wait_time_from(self.clock.now());
            if Instant::now() + wait > until {
                return Err(Throttled { qps: self.rate.qps, burst: self.rate.burst });
            }
            tokio::time::sleep(wait).await;
            waited += wait;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn writes_past_the_burst_wait_for_the_rate() {
        let limiter = WriteLimiter::new(WriteRate { qps: 10, burst: 2 });
        let far = Instant::now() + Duration::from_secs(60);
        assert_eq!(limiter.acquire(far).await, Ok(Duration::ZERO));
        assert_eq!(limiter.acquire(far).await, Ok(Duration::ZERO));
        assert_eq!(limiter.acquire(far).await, Ok(Duration::from_millis(100)), "the third waits one tick of 10/s");
        assert_eq!(limiter.acquire(far).await, Ok(Duration::from_millis(100)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_whose_token_comes_after_the_deadline_fails_at_once() {
        let limiter = WriteLimiter::new(WriteRate { qps: 1, burst: 1 });
        let soon = Instant::now() + Duration::from_millis(500);
        limiter.acquire(soon).await.unwrap();
        let started = Instant::now();
        let err = limiter.acquire(soon).await.unwrap_err();
        assert_eq!(started.elapsed(), Duration::ZERO, "it did not sleep into the deadline");
        assert!(err.to_string().contains("1 writes/s (burst 1)"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_try_past_the_burst_fails_at_once_and_succeeds_again_after_a_tick() {
        let limiter = WriteLimiter::new(WriteRate { qps: 10, burst: 2 });
        assert!(limiter.try_acquire() && limiter.try_acquire(), "the burst");
        assert!(!limiter.try_acquire(), "no token left: refused without waiting");
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(limiter.try_acquire(), "one tick of 10/s later");
        assert!(WriteLimiter::new(WriteRate { qps: 0, burst: 0 }).try_acquire(), "0: no limit");
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_zero_is_twice_the_rate() {
        let limiter = WriteLimiter::new(WriteRate { qps: 2, burst: 0 });
        let now = Instant::now();
        assert!((0..4).all(|_| limiter.try_acquire()), "four at once: twice 2/s");
        assert!(!limiter.try_acquire(), "the fifth waits for the rate");
        assert!(limiter.acquire(now).await.is_err());
    }

    #[test]
    fn by_default_a_plugin_has_no_write_cap() {
        assert_eq!(WriteRate::default().qps, 0);
        assert!(WriteLimiter::new(WriteRate::default()).try_acquire_n(1_000_000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_of_zero_is_no_limit() {
        let limiter = WriteLimiter::new(WriteRate { qps: 0, burst: 0 });
        let now = Instant::now();
        for _ in 0..10_000 {
            assert_eq!(limiter.acquire(now).await, Ok(Duration::ZERO));
        }
    }
}
