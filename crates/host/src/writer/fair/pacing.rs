//! Yielding to a light neighbour: a plugin that uses far more of the API server than another
//! plugin writing at the same time is paced to the rate that keeps that neighbour's latency near
//! what the neighbour sees unloaded, as LEDBAT (RFC 6817) makes a bulk flow yield to others by
//! the queueing delay it adds.
//!
//! Seats alone cannot do this: they share the API server's concurrency, not its CPU, so a plugin
//! holding a few seats back to back still slows every other plugin's requests (measured in
//! benches/HISTORY.md, "Fair write scheduler"). Pacing starts only when a neighbour writes, so a
//! plugin alone, or plugins of like use, are never slowed by it; it starts low and rises while the
//! neighbour's latency stays within [`TARGET`] of its least, and falls by a fifth while it does
//! not. Hand-written: it is a policy of the scheduler beside it, not a general limiter.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// Half-life of a plugin's remembered demand.
const DEMAND_HALF_LIFE: Duration = Duration::from_secs(1);

/// A plugin is heavy when its demand is this many times that of a neighbour's…
const HEAVY_RATIO: f64 = 4.0;

/// …and above this much: about one request waiting or in flight all the time (the decayed
/// integral of a steady one is the half-life over ln 2, 1.44 s). A plugin asking less is never
/// paced.
const HEAVY_FLOOR: f64 = 1.0;

/// How far a neighbour's smoothed latency may rise above its least before heavy plugins slow
/// down: the greedy-neighbour goal (issue 30).
pub const TARGET: f64 = 1.2;

/// The rate (requests a second) a heavy plugin starts at when a neighbour appears, and the least
/// it falls to: never starved.
const MIN_RATE: f64 = 10.0;

/// The most a paced rate grows to (requests a second): past any API server's, so growing in
/// quiet never overflows into a rate a decrease cannot bring back.
const MAX_RATE: f64 = 10_000.0;

/// How fast the paced rate grows (requests a second, each second) while the neighbour's answers
/// stay within target. Grown by the time since the previous light answer (or since pacing
/// began), at most [`QUIET_NEIGHBOUR`], not by the count of answers: a neighbour writing twice a
/// second does not hold a heavy plugin near [`MIN_RATE`] for good, and one answered 150 times a
/// second does not let the rate outrun the latency it signals (one request a second per answer
/// gave a neighbour p99 of 0.95–1.27× of alone; this, 0.93–1.14×; BENCHMARKS.md, "Greedy
/// neighbour: paced from a neighbour's first answer"). A neighbour quiet for longer than
/// [`NEIGHBOUR_MEMORY`] ends the pacing, so one writing less than once a second meets a heavy
/// plugin started again at [`MIN_RATE`] after each pause.
const RATE_GROWTH: f64 = 40.0;

/// A plugin counts as a neighbour to yield to while it has a request waiting or in flight, or
/// had one answered within this long. By time, not by its demand: a neighbour whose writes are
/// answered in a few milliseconds uses too little to tell from idle by demand, and a heavy plugin
/// unpaced between those writes is what slows the next one.
const NEIGHBOUR_MEMORY: Duration = Duration::from_secs(1);

/// With no answer from a light neighbour for this long (since pacing began or since its last),
/// heavy plugins speed up by [`QUIET_GROWTH`] an answer of their own, as a flow does in slow
/// start: a neighbour whose request waits or hangs, with nothing answered, does not hold them at
/// their least rate (one that stopped writing ends the pacing after [`NEIGHBOUR_MEMORY`]).
const QUIET_NEIGHBOUR: Duration = Duration::from_secs(1);
const QUIET_GROWTH: f64 = 1.1;

/// Rate kept on each decrease (at most one a [`DECREASE_EVERY`]).
const DECREASE: f64 = 0.8;
const DECREASE_EVERY: Duration = Duration::from_millis(100);

/// Weight of one answer in a plugin's smoothed latency.
const SMOOTHING: f64 = 0.1;

/// How fast a plugin's remembered least latency rises with age (0.2% a second).
const BASELINE_DRIFT_PER_SEC: f64 = 0.002;

/// Per-plugin use of the API server and the rate heavy plugins are held to.
#[derive(Default)]
pub(super) struct Pacing {
    plugins: HashMap<Arc<str>, Use>,
    /// Requests a second each heavy plugin may start; `None` while no plugin is paced.
    rate: Option<f64>,
    last_decrease: Option<Instant>,
    /// When a plugin that is not heavy was last answered, or pacing began.
    last_light_answer: Option<Instant>,
}

/// A plugin's demand: its requests waiting or in flight, integrated over time with decay. Demand
/// rather than seats held, so pacing a plugin does not make it look light.
struct Use {
    /// The decayed integral of `outstanding` (request-seconds), as of `at`.
    demand: f64,
    outstanding: usize,
    at: Instant,
    /// When its last request was answered by the API server.
    last_answer: Option<Instant>,
    /// The earliest this plugin may start its next request while paced.
    next_start: Option<Instant>,
    smoothed: Option<f64>,
    least: Option<(f64, Instant)>,
}

impl Use {
    fn new(now: Instant) -> Self {
        Self { demand: 0.0, outstanding: 0, at: now, last_answer: None, next_start: None, smoothed: None, least: None }
    }

    fn demand(&self, now: Instant) -> f64 {
        let tau = DEMAND_HALF_LIFE.as_secs_f64() / std::f64::consts::LN_2;
        let kept = (-(now - self.at).as_secs_f64() / tau).exp();
        self.demand * kept + self.outstanding as f64 * tau * (1.0 - kept)
    }

    /// Adds `change` to the requests outstanding from `now` on.
    fn outstanding(&mut self, change: isize, now: Instant) {
        self.demand = self.demand(now);
        self.at = now;
        self.outstanding = self.outstanding.saturating_add_signed(change);
    }

    /// Whether this plugin writes now or lately, as a neighbour to yield to.
    fn active(&self, now: Instant) -> bool {
        self.outstanding > 0 || self.last_answer.is_some_and(|at| now - at < NEIGHBOUR_MEMORY)
    }
}

impl Pacing {
    /// The rate heavy plugins are held to now, if any is (for the metrics).
    pub(super) fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// `plugin` asks for a seat.
    pub(super) fn asked(&mut self, plugin: &Arc<str>, now: Instant) {
        self.plugins.entry(plugin.clone()).or_insert_with(|| Use::new(now)).outstanding(1, now);
        self.plugins.retain(|_, u| u.active(now) || u.next_start.is_some_and(|at| at > now));
    }

    /// A caller of `plugin`'s stopped waiting before it got a seat.
    pub(super) fn left(&mut self, plugin: &str, now: Instant) {
        if let Some(u) = self.plugins.get_mut(plugin) {
            u.outstanding(-1, now);
        }
    }

    /// Whether `plugin` uses far more than some neighbour writing lately.
    fn heavy(&self, plugin: &str, now: Instant) -> bool {
        let Some(mine) = self.plugins.get(plugin).map(|u| u.demand(now)) else { return false };
        mine > HEAVY_FLOOR
            && self
                .plugins
                .iter()
                .any(|(other, u)| &**other != plugin && u.active(now) && mine > HEAVY_RATIO * u.demand(now))
    }

    /// When `plugin` may start its next request: now, or later while it is heavy and paced.
    pub(super) fn may_start(&mut self, plugin: &str, now: Instant) -> Result<(), Instant> {
        if !self.heavy(plugin, now) {
            if let Some(u) = self.plugins.get_mut(plugin) {
                u.next_start = None;
            }
            return Ok(());
        }
        let rate = *self.rate.get_or_insert_with(|| {
            self.last_light_answer = Some(now);
            MIN_RATE
        });
        let u = self.plugins.get_mut(plugin).expect("a heavy plugin has a use");
        match u.next_start {
            Some(at) if at > now => Err(at),
            _ => {
                // At most one interval of credit for a pause in its asking.
                let interval = Duration::from_secs_f64(1.0 / rate);
                let start = match (u.next_start, now.checked_sub(interval)) {
                    (Some(at), Some(earliest)) => at.max(earliest),
                    _ => now,
                };
                u.next_start = Some(start + interval);
                Ok(())
            }
        }
    }

    /// `plugin`'s request held its seat for `held` and was answered (`answered`: its latency
    /// is the API server's, worth learning from).
    pub(super) fn done(&mut self, plugin: &str, held: Duration, answered: bool, now: Instant) {
        let heavy = self.heavy(plugin, now);
        let Some(u) = self.plugins.get_mut(plugin) else { return };
        u.outstanding(-1, now);
        if !answered {
            return;
        }
        u.last_answer = Some(now);
        let sample = held.as_secs_f64();
        let smoothed = u.smoothed.map_or(sample, |s| s + SMOOTHING * (sample - s));
        u.smoothed = Some(smoothed);
        let (recorded, least) = match u.least {
            Some((least, at)) => (least, least * (1.0 + BASELINE_DRIFT_PER_SEC).powf((now - at).as_secs_f64())),
            None => (f64::INFINITY, f64::INFINITY),
        };
        // Falling: below the least as recorded. Level with it is steady, not falling, or a
        // neighbour whose latency never moves would never let the rate grow.
        let falling = smoothed < recorded;
        if smoothed <= least {
            u.least = Some((smoothed, now));
        }
        let least = least.min(smoothed);
        let Some(rate) = self.rate.as_mut() else { return };
        if heavy {
            if self.last_light_answer.is_some_and(|at| now - at >= QUIET_NEIGHBOUR) {
                *rate = (*rate * QUIET_GROWTH).min(MAX_RATE);
            }
            return;
        }
        let since = self.last_light_answer.replace(now).map_or(Duration::ZERO, |at| (now - at).min(QUIET_NEIGHBOUR));
        if smoothed > TARGET * least {
            if self.last_decrease.is_none_or(|at| now - at >= DECREASE_EVERY) {
                *rate = (*rate * DECREASE).max(MIN_RATE);
                self.last_decrease = Some(now);
            }
        } else if !falling {
            // Not while the neighbour's latency still falls to a new least: that least is not
            // known yet, and rising then would settle on a loaded one.
            *rate = (*rate + RATE_GROWTH * since.as_secs_f64()).min(MAX_RATE);
        }
    }

    /// Forgets the pacing once no plugin is heavy any more.
    pub(super) fn settle(&mut self, now: Instant) {
        if self.rate.is_some() && !self.plugins.keys().any(|p| self.heavy(p, now)) {
            self.rate = None;
            self.last_decrease = None;
            self.last_light_answer = None;
        }
    }
}
