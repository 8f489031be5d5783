//! Rate limiters: how long a key waits before it is retried after a failed reconcile.
//!
//! The limiters follow client-go's `util/workqueue/default_rate_limiters.go` (same names, same
//! arithmetic). They are hand-written: no well-kept crate offers per-key failure backoff, and the
//! token bucket needs reserve-and-wait semantics that `governor` does not expose (see [`Bucket`]).
//! All time comes from [`tokio::time::Instant`], so tests run on virtual time.

use std::{collections::HashMap, hash::Hash, sync::Arc, time::Duration};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Decides how long a key waits before it is retried, and counts its retries.
///
/// client-go's `TypedRateLimiter`: [`when`](Self::when) is called once per failure and may
/// record it; [`forget`](Self::forget) clears a key's history once it has succeeded.
pub trait RateLimiter<K>: Send + Sync {
    /// Records a failure of `key` and returns how long it should wait before it is retried.
    fn when(&self, key: &K) -> Duration;
    /// Forgets `key`'s failures, so its next failure starts from the first delay again.
    fn forget(&self, key: &K);
    /// How many times `key` has failed since it was last forgotten.
    fn num_requeues(&self, key: &K) -> u32;
}

impl<K, R: RateLimiter<K> + ?Sized> RateLimiter<K> for Arc<R> {
    fn when(&self, key: &K) -> Duration {
        (**self).when(key)
    }
    fn forget(&self, key: &K) {
        (**self).forget(key);
    }
    fn num_requeues(&self, key: &K) -> u32 {
        (**self).num_requeues(key)
    }
}

impl<K, R: RateLimiter<K> + ?Sized> RateLimiter<K> for Box<R> {
    fn when(&self, key: &K) -> Duration {
        (**self).when(key)
    }
    fn forget(&self, key: &K) {
        (**self).forget(key);
    }
    fn num_requeues(&self, key: &K) -> u32 {
        (**self).num_requeues(key)
    }
}

/// The limiter controllers use unless told otherwise: the larger of a per-key exponential
/// backoff (5 ms → 1000 s) and an overall bucket (10 qps, burst 100).
///
/// Same as client-go's `DefaultTypedControllerRateLimiter`.
pub fn default_controller<K>() -> MaxOf<K>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
{
    MaxOf::default().limiter(ItemExponentialFailure::default()).limiter(Bucket::default())
}

/// The parameters of [`default_controller`], settable per plugin (`rateLimiter:` in its
/// config file; strict: unknown fields are errors). Every default is client-go's
/// `DefaultControllerRateLimiter`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LimiterConfig {
    /// A key's delay after its first failure, in ms; doubles with each failure (default 5).
    pub base_delay_ms: u64,
    /// The longest delay of a key, in ms (default 1,000,000: 1000 s).
    pub max_delay_ms: u64,
    /// Retries a second across all keys of the controller (default 10).
    pub qps: f64,
    /// Retries that may go at once before `qps` applies (default 100).
    pub burst: u32,
}

impl Default for LimiterConfig {
    fn default() -> Self {
        Self { base_delay_ms: 5, max_delay_ms: 1_000_000, qps: 10.0, burst: 100 }
    }
}

impl LimiterConfig {
    /// The larger of the per-key exponential backoff and the overall bucket, as
    /// [`default_controller`] with these parameters.
    pub fn build<K>(&self) -> MaxOf<K>
    where
        K: Clone + Eq + Hash + Send + Sync + 'static,
    {
        let exponential = ItemExponentialFailure::default()
            .base(Duration::from_millis(self.base_delay_ms))
            .max(Duration::from_millis(self.max_delay_ms));
        MaxOf::default().limiter(exponential).limiter(Bucket::new(self.qps, self.burst))
    }
}

/// Per-key exponential backoff: `base · 2^failures`, capped at `max`.
///
/// Defaults 5 ms base and 1000 s cap, from client-go's `DefaultControllerRateLimiter`.
pub struct ItemExponentialFailure<K> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K> Default for ItemExponentialFailure<K> {
    fn default() -> Self {
        Self { base: Duration::from_millis(5), max: Duration::from_secs(1000), failures: Mutex::new(HashMap::new()) }
    }
}

impl<K> ItemExponentialFailure<K> {
    /// The delay after the first failure (default 5 ms).
    #[must_use]
    pub fn base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// The longest delay (default 1000 s).
    #[must_use]
    pub fn max(mut self, max: Duration) -> Self {
        self.max = max;
        self
    }
}

impl<K: Clone + Eq + Hash + Send + Sync> RateLimiter<K> for ItemExponentialFailure<K> {
    fn when(&self, key: &K) -> Duration {
        let exp = {
            let mut failures = self.failures.lock();
            let count = failures.entry(key.clone()).or_insert(0);
            let exp = *count;
            *count = count.saturating_add(1);
            exp
        };
        // base · 2^exp in nanoseconds; anything past u128 or `max` is `max`.
        let delay = 1u128.checked_shl(exp).and_then(|factor| self.base.as_nanos().checked_mul(factor));
        match delay {
            Some(nanos) if nanos <= self.max.as_nanos() => {
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
            }
            _ => self.max,
        }
    }

    fn forget(&self, key: &K) {
        self.failures.lock().remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.failures.lock().get(key).copied().unwrap_or(0)
    }
}

/// Per-key two-speed backoff: `fast` for the first `max_fast_attempts` failures, then `slow`.
///
/// client-go's `ItemFastSlowRateLimiter`, which has no defaults either.
pub struct ItemFastSlow<K> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K> ItemFastSlow<K> {
    /// Waits `fast` after each of the first `max_fast_attempts` failures of a key, `slow` after.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        Self { fast, slow, max_fast_attempts, failures: Mutex::new(HashMap::new()) }
    }
}

impl<K: Clone + Eq + Hash + Send + Sync> RateLimiter<K> for ItemFastSlow<K> {
    fn when(&self, key: &K) -> Duration {
        let mut failures = self.failures.lock();
        let count = failures.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
        if *count <= self.max_fast_attempts { self.fast } else { self.slow }
    }

    fn forget(&self, key: &K) {
        self.failures.lock().remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.failures.lock().get(key).copied().unwrap_or(0)
    }
}

/// An overall token bucket shared by all keys: `qps` tokens a second, at most `burst` saved up.
///
/// Defaults 10 qps and burst 100, from client-go's `DefaultControllerRateLimiter`. Each call to
/// [`when`](RateLimiter::when) *reserves* a token, like `rate.Limiter.Reserve().Delay()` in
/// golang.org/x/time/rate: the token is taken even when none is available yet (the balance goes
/// negative) and the caller is told how long to wait for it, so a burst of 102 failures at once
/// yields delays 0 (×100), 100 ms, 200 ms. Hand-written rather than built on `governor`: its
/// `check()` either admits now or refuses without booking a future slot, so successive refusals
/// would all get the same wait instead of being spread out, and it reads its own clock rather
/// than tokio's virtual one. Keys are not tracked: `forget` does nothing and `num_requeues` is 0.
pub struct Bucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

struct BucketState {
    tokens: f64,
    last: Option<Instant>,
}

impl Default for Bucket {
    fn default() -> Self {
        Self::new(10.0, 100)
    }
}

impl Bucket {
    /// A bucket refilled at `qps` tokens a second holding at most `burst` (at least 1) tokens;
    /// it starts full. A non-finite `qps` never delays; `qps <= 0` delays by `Duration::MAX`.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self { qps, burst, state: Mutex::new(BucketState { tokens: burst, last: None }) }
    }
}

impl<K> RateLimiter<K> for Bucket {
    fn when(&self, _key: &K) -> Duration {
        if !self.qps.is_finite() {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let mut state = self.state.lock();
        if let Some(last) = state.last {
            let refill = now.saturating_duration_since(last).as_secs_f64() * self.qps.max(0.0);
            state.tokens = (state.tokens + refill).min(self.burst);
        }
        if state.last.is_none_or(|last| now > last) {
            state.last = Some(now);
        }
        state.tokens -= 1.0;
        if state.tokens >= 0.0 {
            Duration::ZERO
        } else if self.qps <= 0.0 {
            Duration::MAX
        } else {
            let nanos = (-state.tokens / self.qps * 1e9).round();
            Duration::from_nanos(if nanos >= u64::MAX as f64 { u64::MAX } else { nanos as u64 })
        }
    }

    fn forget(&self, _key: &K) {}

    fn num_requeues(&self, _key: &K) -> u32 {
        0
    }
}

/// The largest delay of several limiters; every limiter sees every failure.
///
/// client-go's `MaxOfRateLimiter`: `num_requeues` is the largest count, `forget` reaches all.
pub struct MaxOf<K> {
    limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K> Default for MaxOf<K> {
    fn default() -> Self {
        Self { limiters: Vec::new() }
    }
}

impl<K> MaxOf<K> {
    /// Adds a limiter to consult.
    #[must_use]
    pub fn limiter(mut self, limiter: impl RateLimiter<K> + 'static) -> Self {
        self.limiters.push(Box::new(limiter));
        self
    }
}

impl<K> RateLimiter<K> for MaxOf<K> {
    fn when(&self, key: &K) -> Duration {
        self.limiters.iter().map(|limiter| limiter.when(key)).max().unwrap_or(Duration::ZERO)
    }

    fn forget(&self, key: &K) {
        for limiter in &self.limiters {
            limiter.forget(key);
        }
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.limiters.iter().map(|limiter| limiter.num_requeues(key)).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn exponential_delays_double_from_five_ms_and_stop_at_the_cap() {
        let limiter = ItemExponentialFailure::default().max(Duration::from_millis(100));
        let delays: Vec<_> = (0..7).map(|_| limiter.when(&"a")).collect();
        assert_eq!(delays, [5 * MS, 10 * MS, 20 * MS, 40 * MS, 80 * MS, 100 * MS, 100 * MS]);
        assert_eq!(limiter.num_requeues(&"a"), 7);
        assert_eq!(limiter.when(&"b"), 5 * MS, "keys back off independently");
    }

    #[test]
    fn a_limiter_config_sets_the_exponential_bounds_and_the_bucket() {
        let config: LimiterConfig =
            serde_yaml::from_str("baseDelayMs: 100\nmaxDelayMs: 300\nqps: 1\nburst: 3\n").unwrap();
        let limiter = config.build();
        let delays: Vec<_> = (0..3).map(|_| limiter.when(&"a")).collect();
        assert_eq!(delays, [100 * MS, 200 * MS, 300 * MS], "doubling from the base to the cap");
        assert!(limiter.when(&"b") >= 900 * MS, "past the burst of 3, retries wait for the 1 qps bucket");
        assert_eq!(LimiterConfig::default().build::<&str>().when(&"c"), 5 * MS, "client-go's defaults");
    }

    #[test]
    fn a_limiter_config_with_an_unknown_field_is_an_error() {
        let err = serde_yaml::from_str::<LimiterConfig>("qpss: 1\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `qpss`"), "{err}");
    }

    #[test]
    fn exponential_backoff_restarts_after_forget() {
        let limiter = ItemExponentialFailure::default();
        limiter.when(&"a");
        limiter.when(&"a");
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.when(&"a"), 5 * MS);
    }

    #[test]
    fn exponential_backoff_does_not_overflow_after_many_failures() {
        let limiter = ItemExponentialFailure::default();
        let last = (0..200).map(|_| limiter.when(&"a")).last();
        assert_eq!(last, Some(Duration::from_secs(1000)));
    }

    #[test]
    fn fast_slow_is_fast_for_the_first_attempts_then_slow() {
        let limiter = ItemFastSlow::new(5 * MS, Duration::from_secs(10), 3);
        let delays: Vec<_> = (0..5).map(|_| limiter.when(&"a")).collect();
        let slow = Duration::from_secs(10);
        assert_eq!(delays, [5 * MS, 5 * MS, 5 * MS, slow, slow]);
        assert_eq!(limiter.num_requeues(&"a"), 5);
        limiter.forget(&"a");
        assert_eq!(limiter.when(&"a"), 5 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_lets_a_burst_through_then_spaces_retries_by_one_over_qps() {
        let bucket = Bucket::default();
        for n in 0..100 {
            assert_eq!(bucket.when(&n), Duration::ZERO, "token {n} is in the burst");
        }
        assert_eq!(bucket.when(&100), 100 * MS);
        assert_eq!(bucket.when(&101), 200 * MS, "each call reserves the next slot");
        tokio::time::advance(100 * MS).await;
        assert_eq!(bucket.when(&102), 200 * MS, "one token came back, one more was booked");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(bucket.when(&103), Duration::ZERO, "refilled, capped at the burst");
        assert_eq!(RateLimiter::<i32>::num_requeues(&bucket, &0), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn max_of_takes_the_longest_delay_and_forgets_everywhere() {
        let limiter = MaxOf::default()
            .limiter(ItemFastSlow::new(MS, Duration::from_secs(1), 2))
            .limiter(ItemExponentialFailure::default());
        let delays: Vec<_> = (0..4).map(|_| limiter.when(&"a")).collect();
        assert_eq!(delays, [5 * MS, 10 * MS, Duration::from_secs(1), Duration::from_secs(1)]);
        assert_eq!(limiter.num_requeues(&"a"), 4);
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.when(&"a"), 5 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn default_controller_limiter_is_exponential_until_the_bucket_runs_dry() {
        let limiter = default_controller::<String>();
        let a = "a".to_string();
        assert_eq!(limiter.when(&a), 5 * MS);
        assert_eq!(limiter.when(&a), 10 * MS);
        for n in 0..98 {
            limiter.when(&format!("other-{n}"));
        }
        // 101st token: the bucket asks for 100 ms, more than the key's own 20 ms.
        assert_eq!(limiter.when(&a), 100 * MS);
        assert_eq!(limiter.num_requeues(&a), 3);
    }
}
