//! The membership task: lists the member Leases, computes this replica's range and moves it
//! by the hand-over protocol of the module doc.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use prometheus::{IntCounter, IntGauge, Registry};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::cuts::{Cuts, members_digest};
use super::range::{HASH_SPACE_END, HashRange, fnv1a64};
use super::{CLAIM_ANNOTATION, CUTS_ANNOTATION, Config, Error, Result, SERVING_ANNOTATION, ShardGate};
use crate::leader::{self, Election};

/// A running membership: this replica's Lease (renewed by the elector) and the task that moves
/// its range.
pub struct Membership {
    election: Election,
    task: JoinHandle<()>,
    stop: CancellationToken,
    gate: ShardGate,
    api: Api<Lease>,
    lease: String,
}

impl Membership {
    /// Holds this replica's Lease and starts moving ranges through `gate`.
    pub fn start(client: Client, config: Config, gate: ShardGate, registry: &Registry) -> Result<Self> {
        let lease = config.lease_name();
        let lease_config = leader::Config::new(&config.namespace, &lease).identity(&config.identity).timings(
            config.lease_duration,
            config.renew_deadline,
            config.retry_period,
        );
        let election = Election::start(client.clone(), lease_config, registry).map_err(Error::Lease)?;
        let metrics = Metrics::register(registry)?;
        gate.register_metrics(registry).map_err(Error::Metrics)?;
        let api = Api::namespaced(client.clone(), &config.namespace);
        tracing::info!(lease = %format!("{}/{lease}", config.namespace), identity = %config.identity, "sharding: joining");
        let member = Member {
            api: api.clone(),
            namespaces: Api::all(client),
            config,
            lease: lease.clone(),
            gate: gate.clone(),
            observed: HashMap::new(),
            serving: None,
            cuts_checked: None,
            listing_failed: false,
            metrics,
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(member.run(stop.clone()));
        Ok(Self { election, task, stop, gate, api, lease })
    }

    /// Resolves when this replica lost its own Lease: others may take its range by now.
    pub async fn lost(&mut self) -> leader::Error {
        self.election.lost().await
    }

    /// Leaves the group: stops serving (call after the controllers drained), clears the claim,
    /// stops renewing and deletes the Lease, so the others rebalance at once.
    pub async fn leave(self) {
        self.stop.cancel();
        let _ = self.task.await;
        self.gate.serve(None).await;
        if let Err(e) = publish(&self.api, &self.lease, &[(SERVING_ANNOTATION, None), (CLAIM_ANNOTATION, None)]).await {
            tracing::warn!(error = %e, "sharding: could not clear the served range; it expires with the Lease");
        }
        self.election.release().await;
        match self.api.delete(&self.lease, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(lease = %self.lease, "sharding: left"),
            Err(e) => tracing::warn!(lease = %self.lease, error = %e, "sharding: could not delete the Lease"),
        }
    }
}

/// Writes each value (or the empty string) into `lease`'s annotation of that name, at once.
async fn publish(api: &Api<Lease>, lease: &str, values: &[(&str, Option<String>)]) -> kube::Result<()> {
    let annotations: serde_json::Map<String, serde_json::Value> =
        values.iter().map(|(name, value)| ((*name).to_owned(), value.clone().unwrap_or_default().into())).collect();
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    api.patch(lease, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)
}

/// Shard metric handles.
struct Metrics {
    members: IntGauge,
    serving: IntGauge,
    handovers: IntCounter,
}

impl Metrics {
    fn register(registry: &Registry) -> Result<Self> {
        let members = IntGauge::new("kubewasm_shard_members", "Live members of this replica's shard group");
        let serving = IntGauge::new(
            "kubewasm_shard_serving_per_mille",
            "Share of the hash space this replica serves now, in thousandths (0 while it serves none)",
        );
        let handovers = IntCounter::new("kubewasm_shard_handovers_total", "Ranges this replica stopped serving");
        let (members, serving, handovers) =
            (members.map_err(Error::Metrics)?, serving.map_err(Error::Metrics)?, handovers.map_err(Error::Metrics)?);
        for metric in [
            Box::new(members.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(serving.clone()),
            Box::new(handovers.clone()),
        ] {
            registry.register(metric).map_err(Error::Metrics)?;
        }
        Ok(Self { members, serving, handovers })
    }
}

/// A Lease's record as last seen, and when it changed on our clock (client-go `observedTime`).
struct Observed {
    record: (Option<String>, Option<String>, Option<i32>),
    at: Instant,
}

/// One member as listed.
#[derive(Debug)]
struct Peer {
    lease: String,
    identity: String,
    serving: Option<HashRange>,
    /// The range it claims (and may be about to serve).
    claim: Option<HashRange>,
    /// The cuts it published (the coordinator's are the ones that count).
    cuts: Option<Cuts>,
    live: bool,
    resource_version: Option<String>,
}

struct Member {
    api: Api<Lease>,
    namespaces: Api<Namespace>,
    config: Config,
    lease: String,
    gate: ShardGate,
    observed: HashMap<String, Observed>,
    /// The range this replica serves and has published.
    serving: Option<HashRange>,
    /// When this replica, as coordinator, last compared its cuts with the namespaces.
    cuts_checked: Option<Instant>,
    /// Whether listing the namespaces failed (logged once until it works again).
    listing_failed: bool,
    metrics: Metrics,
}

impl Member {
    async fn run(mut self, stop: CancellationToken) {
        loop {
            if let Err(e) = self.step().await {
                tracing::warn!(error = %e, "sharding: membership check failed; retrying");
            }
            let pause = self.config.retry_period.mul_f64(1.0 + 0.2 * jitter());
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One round of the hand-over protocol (module doc, steps 1–4).
    async fn step(&mut self) -> kube::Result<()> {
        let peers = self.peers().await?;
        let mut live: Vec<&str> = peers.iter().filter(|p| p.live).map(|p| p.identity.as_str()).collect();
        live.sort_unstable();
        live.dedup();
        self.metrics.members.set(i64::try_from(live.len()).unwrap_or(i64::MAX));
        let Some(index) = live.iter().position(|m| *m == self.config.identity) else { return Ok(()) };
        let digest = members_digest(&live);
        let cuts = if index == 0 {
            Some(self.coordinate(&peers, live.len(), digest).await?)
        } else {
            coordinators_cuts(&peers, live[0], digest)
        };
        let Some(target) = cuts.and_then(|cuts| cuts.ranges().get(index).copied()) else {
            tracing::debug!(coordinator = live[0], "sharding: waiting for the coordinator's cuts for this membership");
            return Ok(());
        };
        if self.serving == Some(target) {
            return Ok(());
        }
        if let Some(old) = self.serving {
            tracing::info!(serving = %old, next = %target, "sharding: stopping a range to hand it over");
            self.gate.serve(None).await;
            self.metrics.serving.set(0);
            publish(&self.api, &self.lease, &[(SERVING_ANNOTATION, None), (CLAIM_ANNOTATION, None)]).await?;
            self.serving = None;
            self.metrics.handovers.inc();
        }
        self.gate.cache(target);
        if !self.gate.listed_everywhere(target) {
            return Ok(());
        }
        if let Some(other) = claimed_by_others(&peers, &self.lease, target) {
            tracing::debug!(range = %target, %other, "sharding: waiting for another member to release");
            return Ok(());
        }
        publish(&self.api, &self.lease, &[(CLAIM_ANNOTATION, Some(target.to_string()))]).await?;
        let peers = self.peers().await?;
        if let Some(other) = claimed_by_others(&peers, &self.lease, target) {
            tracing::info!(range = %target, %other, "sharding: claim collided; retracting");
            publish(&self.api, &self.lease, &[(CLAIM_ANNOTATION, None)]).await?;
            return Ok(());
        }
        publish(&self.api, &self.lease, &[(SERVING_ANNOTATION, Some(target.to_string()))]).await?;
        self.gate.serve(Some(target)).await;
        self.serving = Some(target);
        self.metrics.serving.set(per_mille(target));
        tracing::info!(range = %target, members = live.len(), "sharding: serving");
        Ok(())
    }

    /// As coordinator: the cuts for this membership. It keeps the cuts it published while they
    /// fit the membership, and at most once a lease duration compares them with the namespaces
    /// that exist, recomputing them only when they are clearly unbalanced
    /// ([`Cuts::unbalanced`]), so a few new namespaces do not move every range.
    async fn coordinate(&mut self, peers: &[Peer], members: usize, digest: u64) -> kube::Result<Cuts> {
        let mine = peers.iter().find(|p| p.lease == self.lease).and_then(|p| p.cuts.clone()).filter(|c| c.fits(digest));
        let due = self.cuts_checked.is_none_or(|at| at.elapsed() >= self.config.lease_duration);
        if let Some(cuts) = mine.as_ref().filter(|_| !due) {
            return Ok(cuts.clone());
        }
        let hashes = self.namespace_hashes().await;
        let cuts = match (mine, hashes.as_deref()) {
            (Some(cuts), Some(hashes)) if !cuts.unbalanced(hashes) => {
                self.cuts_checked = Some(Instant::now());
                return Ok(cuts);
            }
            (Some(cuts), None) => return Ok(cuts),
            (_, Some(hashes)) => Cuts::balanced(digest, members, hashes),
            (None, None) => Cuts::equal(digest, members),
        };
        publish(&self.api, &self.lease, &[(CUTS_ANNOTATION, Some(cuts.to_string()))]).await?;
        self.cuts_checked = Some(Instant::now());
        let shares = hashes.as_deref().map(|h| cuts.shares(h));
        tracing::info!(%cuts, members, namespaces_per_member = ?shares, "sharding: published the cuts");
        Ok(cuts)
    }

    /// The hashes of every namespace, and of `""` (cluster-scoped keys); `None` if they cannot
    /// be listed (then equal slices stand in).
    async fn namespace_hashes(&mut self) -> Option<Vec<u64>> {
        match self.namespaces.list_metadata(&ListParams::default()).await {
            Ok(list) => {
                self.listing_failed = false;
                let names = list.items.into_iter().filter_map(|ns| ns.metadata.name);
                Some(names.map(|name| fnv1a64(&name)).chain([fnv1a64("")]).collect())
            }
            Err(e) => {
                if !std::mem::replace(&mut self.listing_failed, true) {
                    tracing::warn!(error = %e, "sharding: cannot list namespaces to balance the ranges; splitting the hash space evenly");
                }
                None
            }
        }
    }

    /// The member Leases, with liveness on our clock; removes Leases that expired.
    async fn peers(&mut self) -> kube::Result<Vec<Peer>> {
        let prefix = self.config.lease_prefix();
        let leases = self.api.list(&ListParams::default()).await?;
        let mut peers = Vec::new();
        let mut seen = HashSet::new();
        for lease in leases {
            let Some(name) = lease.metadata.name.clone().filter(|n| n.starts_with(&prefix)) else { continue };
            let spec = lease.spec.clone().unwrap_or_default();
            let renew = spec.renew_time.as_ref().map(|t| t.0.to_string());
            let record = (spec.holder_identity.clone(), renew, spec.lease_duration_seconds);
            let observed = self
                .observed
                .entry(name.clone())
                .or_insert_with(|| Observed { record: record.clone(), at: Instant::now() });
            if observed.record != record {
                *observed = Observed { record, at: Instant::now() };
            }
            let duration = Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0));
            let holder = spec.holder_identity.filter(|h| !h.is_empty());
            let live = holder.is_some() && observed.at.elapsed() < duration;
            let annotations = lease.metadata.annotations.unwrap_or_default();
            let range = |name: &str| annotations.get(name).and_then(|text| HashRange::parse(text).ok());
            let (serving, claim) = (range(SERVING_ANNOTATION), range(CLAIM_ANNOTATION));
            let cuts = annotations.get(CUTS_ANNOTATION).and_then(|text| Cuts::parse(text).ok());
            seen.insert(name.clone());
            peers.push(Peer {
                lease: name,
                identity: holder.unwrap_or_default(),
                serving,
                claim,
                cuts,
                live,
                resource_version: lease.metadata.resource_version,
            });
        }
        self.observed.retain(|name, _| seen.contains(name));
        for dead in peers.iter().filter(|p| !p.live && p.lease != self.lease) {
            let precondition = Preconditions { resource_version: dead.resource_version.clone(), uid: None };
            let params = DeleteParams { preconditions: Some(precondition), ..DeleteParams::default() };
            if self.api.delete(&dead.lease, &params).await.is_ok() {
                tracing::info!(lease = %dead.lease, identity = %dead.identity, "sharding: removed an expired member");
            }
        }
        Ok(peers)
    }
}

/// The cuts the coordinator (the live member with the lowest identity) published for the
/// membership with `digest`; `None` until it has.
fn coordinators_cuts(peers: &[Peer], coordinator: &str, digest: u64) -> Option<Cuts> {
    let published = peers.iter().find(|p| p.live && p.identity == coordinator)?.cuts.clone()?;
    published.fits(digest).then_some(published)
}

/// The identity of a live member other than `me` that serves or claims a range overlapping
/// `range`.
fn claimed_by_others(peers: &[Peer], me: &str, range: HashRange) -> Option<String> {
    let overlaps = |r: &Option<HashRange>| r.is_some_and(|r| r.overlaps(&range));
    peers
        .iter()
        .find(|p| p.lease != me && p.live && (overlaps(&p.serving) || overlaps(&p.claim)))
        .map(|p| p.identity.clone())
}

fn per_mille(range: HashRange) -> i64 {
    i64::try_from(range.width() * 1000 / HASH_SPACE_END).unwrap_or(0)
}

/// A number in [0, 1) that differs between processes and calls.
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    f64::from(nanos.wrapping_mul(2_654_435_761) % 1000) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::split;

    fn peer(lease: &str, serving: Option<HashRange>, live: bool) -> Peer {
        Peer {
            lease: lease.into(),
            identity: lease.into(),
            serving,
            claim: None,
            cuts: None,
            live,
            resource_version: None,
        }
    }

    #[test]
    fn members_use_only_the_live_coordinators_cuts_for_the_membership_they_see() {
        let digest = members_digest(&["a", "b"]);
        let cuts = Cuts::equal(digest, 2);
        let mut coordinator = peer("a", None, true);
        coordinator.cuts = Some(cuts.clone());
        let mut other = peer("b", None, true);
        other.cuts = Some(Cuts::equal(digest, 2));
        assert_eq!(coordinators_cuts(&[coordinator, other], "a", digest), Some(cuts.clone()));
        let mut stale = peer("a", None, true);
        stale.cuts = Some(cuts.clone());
        assert_eq!(
            coordinators_cuts(&[stale], "a", members_digest(&["a", "b", "c"])),
            None,
            "computed for another membership"
        );
        let mut dead = peer("a", None, false);
        dead.cuts = Some(cuts);
        assert_eq!(coordinators_cuts(&[dead], "a", digest), None, "an expired coordinator's cuts do not count");
    }

    #[test]
    fn only_live_peers_claims_block_a_range() {
        let [a, b] = split(2)[..] else { panic!() };
        let peers = [peer("me", Some(a), true), peer("dead", Some(a), false), peer("other", Some(b), true)];
        assert_eq!(claimed_by_others(&peers, "me", a), None, "my own and an expired member's claims do not count");
        assert_eq!(claimed_by_others(&peers, "me", HashRange::FULL).as_deref(), Some("other"));
    }

    #[test]
    fn another_members_claim_blocks_a_range_as_its_serving_does() {
        let [a, b] = split(2)[..] else { panic!() };
        let mut claiming = peer("other", None, true);
        claiming.claim = Some(a);
        assert_eq!(claimed_by_others(&[claiming], "me", a).as_deref(), Some("other"));
        let mut elsewhere = peer("other", None, true);
        elsewhere.claim = Some(b);
        assert_eq!(claimed_by_others(&[elsewhere], "me", a), None);
    }

    #[test]
    fn the_served_share_is_in_thousandths() {
        assert_eq!(per_mille(HashRange::FULL), 1000);
        assert_eq!(per_mille(split(4)[3]), 250);
    }
}
