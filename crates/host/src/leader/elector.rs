//! The elector: client-go's `tryAcquireOrRenew` loop on one Lease.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use prometheus::IntGauge;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Config, Error, JITTER_FACTOR, Result};

/// What we last saw of the Lease, and when (on our clock).
#[derive(Debug)]
struct Observed {
    record: (Option<String>, Option<MicroTime>, Option<i32>),
    at: Instant,
}

pub(super) struct Elector {
    api: Api<Lease>,
    config: Config,
    leading: watch::Sender<bool>,
    status: IntGauge,
    observed: Option<Observed>,
}

impl Elector {
    pub(super) fn new(api: Api<Lease>, config: Config, leading: watch::Sender<bool>, status: IntGauge) -> Self {
        Self { api, config, leading, status, observed: None }
    }

    /// Acquires the Lease, then renews it until `release` (then releases it) or the renew
    /// deadline passes without a renewal ([`Error::Lost`]).
    pub(super) async fn run(mut self, release: CancellationToken) -> Result<()> {
        loop {
            if self.attempt(self.config.renew_deadline).await {
                break;
            }
            let pause = self.config.retry_period.mul_f64(1.0 + (JITTER_FACTOR - 1.0) * jitter());
            tokio::select! {
                () = release.cancelled() => return Ok(()),
                () = tokio::time::sleep(pause) => {}
            }
        }
        tracing::info!(lease = %self.config.lease(), identity = %self.config.identity, "leader election: leading");
        self.set_leading(true);
        let mut renewed = Instant::now();
        loop {
            tokio::select! {
                () = release.cancelled() => {
                    self.release().await;
                    return Ok(());
                }
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
            let left = self.config.renew_deadline.saturating_sub(renewed.elapsed());
            if !left.is_zero() && self.attempt(left).await {
                renewed = Instant::now();
            } else if renewed.elapsed() >= self.config.renew_deadline {
                self.set_leading(false);
                let (lease, renew_deadline) = (self.config.lease(), self.config.renew_deadline);
                tracing::error!(%lease, "leader election: lease lost");
                return Err(Error::Lost { lease, renew_deadline });
            }
        }
    }

    fn set_leading(&self, leading: bool) {
        self.status.set(i64::from(leading));
        self.leading.send_replace(leading);
    }

    /// One `tryAcquireOrRenew`, given at most `budget`.
    async fn attempt(&mut self, budget: Duration) -> bool {
        match tokio::time::timeout(budget, self.try_acquire_or_renew()).await {
            Ok(Ok(won)) => won,
            Ok(Err(e)) => {
                tracing::warn!(lease = %self.config.lease(), error = %e, "leader election: request failed");
                false
            }
            Err(_) => false,
        }
    }

    async fn try_acquire_or_renew(&mut self) -> kube::Result<bool> {
        let now = MicroTime(Timestamp::now());
        let duration = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let spec = LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(duration),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            };
            let mut lease = Lease { spec: Some(spec), ..Lease::default() };
            lease.metadata.name = Some(self.config.name.clone());
            let created = self.api.create(&PostParams::default(), &lease).await?;
            self.observe(created.spec.as_ref());
            return Ok(true);
        };
        let old = lease.spec.clone().unwrap_or_default();
        self.observe(Some(&old));
        let holder = old.holder_identity.as_deref().filter(|h| !h.is_empty());
        let mine = holder == Some(self.config.identity.as_str());
        if holder.is_some() && !mine && !self.observed_expired() {
            return Ok(false);
        }
        let mut spec = old.clone();
        if !mine {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(old.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.config.identity.clone());
        spec.lease_duration_seconds = Some(duration);
        spec.renew_time = Some(now);
        lease.spec = Some(spec);
        // `replace` sends the resourceVersion we read: a concurrent writer makes this a 409.
        let stored = self.api.replace(&self.config.name, &PostParams::default(), &lease).await?;
        self.observe(stored.spec.as_ref());
        Ok(true)
    }

    /// Remembers when the Lease's record last changed, on our clock (client-go's `observedTime`).
    fn observe(&mut self, spec: Option<&LeaseSpec>) {
        let spec = spec.cloned().unwrap_or_default();
        let record = (spec.holder_identity, spec.renew_time, spec.lease_duration_seconds);
        if self.observed.as_ref().is_none_or(|o| o.record != record) {
            self.observed = Some(Observed { record, at: Instant::now() });
        }
    }

    fn observed_expired(&self) -> bool {
        self.observed.as_ref().is_none_or(|o| {
            let seconds = u64::try_from(o.record.2.unwrap_or(0)).unwrap_or(0);
            o.at.elapsed() >= Duration::from_secs(seconds)
        })
    }

    /// Clears the holder if it is us, so followers need not wait for the lease to expire.
    async fn release(&mut self) {
        self.set_leading(false);
        let result = async {
            let Some(mut lease) = self.api.get_opt(&self.config.name).await? else { return Ok(false) };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(false);
            }
            let now = MicroTime(Timestamp::now());
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            (spec.acquire_time, spec.renew_time) = (Some(now.clone()), Some(now));
            self.api.replace(&self.config.name, &PostParams::default(), &lease).await.map(|_| true)
        };
        match result.await {
            Ok(true) => tracing::info!(lease = %self.config.lease(), "leader election: lease released"),
            Ok(false) => {}
            Err(e) => tracing::warn!(lease = %self.config.lease(), error = %e, "leader election: release failed"),
        }
    }
}

/// A number in [0, 1) that differs between processes and calls (jitter needs no strong randomness).
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    f64::from(nanos.wrapping_mul(2_654_435_761) % 1000) / 1000.0
}
