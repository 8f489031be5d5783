//! Sharding: replicas that split the work by hash range, found through one Lease each, with
//! server-side sharded list and watch (KEP-5866) and a hand-over that never runs a key twice.
//!
//! # What is sharded
//!
//! Every key's shard hash is the 64-bit FNV-1a of its **namespace** (`shardRange` over
//! `object.metadata.namespace`, the API server's `HashField`): a namespace's objects stay on one
//! replica. So the objects a namespaced owner owns (same namespace, Kubernetes' rule) reach the
//! replica that reconciles it, and its for-kind and owned-kind caches can both be sharded. The
//! host shards, per plugin:
//!
//! - the **for kind**'s informer (list and watch with `shardSelector`);
//! - the **owned kinds**' informers when the for kind is namespaced (its dependents are in its
//!   namespace) and the plugin does not also read or watch them;
//! - nothing else: read and watched kinds are cached whole, since a read or a `map` may cross
//!   namespaces; the keys `map` returns are dropped by replicas that do not own them.
//!
//! A **cluster-scoped** for kind has no namespace: all its keys hash alike (`fnv1a("")`), so
//! one replica, the owner of that hash, reconciles all of it (the host logs this when it wires
//! such a plugin). uid sharding would spread them, but a key (`name`) does not carry its uid,
//! so a replica could not tell whether a deleted object was its own.
//!
//! # Membership
//!
//! Each replica holds its own Lease `<id>-shard-<fnv(identity)>` in the host's namespace,
//! renewed by the leader-election elector ([`crate::leader`], the same timings and the same rule
//! for expiry: a record unchanged for `leaseDurationSeconds` on the observer's clock). The
//! live members are the unexpired Leases, sorted by holder identity; member `i` of `n` is
//! assigned the `i`-th of `n` contiguous ranges. A replica that cannot renew its Lease within
//! the renew deadline exits, as a leader does.
//!
//! The ranges are cut so that each member gets about the same number of **namespaces**
//! ([`Cuts`]): FNV-1a puts similar names (`bench-0` … `bench-99`) close together, so equal
//! slices of 2^64 would leave one member with all of them. The **coordinator**, the live member
//! with the lowest identity, lists the namespaces, computes the cuts and publishes them in its
//! Lease's annotation [`CUTS_ANNOTATION`], tagged with a digest of the membership it saw; the
//! others use them only when that digest matches the membership they see, and otherwise wait.
//! The coordinator recomputes the cuts when the membership changes, and, at most once a lease
//! duration, when the namespaces that exist left some member clearly more than its share.
//! Balance is by namespace count, not by objects: a namespace much larger than the others
//! still lands whole on one member. Without the right to list namespaces the coordinator cuts
//! equal slices and logs why once.
//!
//! # Hand-over protocol
//!
//! Each member publishes in its Lease's annotations the range it claims
//! ([`CLAIM_ANNOTATION`]) and the range it serves ([`SERVING_ANNOTATION`]; empty: none). Every
//! retry period a member lists the Leases (a quorum read) and:
//!
//! 1. if it serves a range other than its assignment, **stops**: it closes the gate (no new
//!    reconcile starts; it waits for those in flight), then clears both annotations;
//! 2. points its sharded informers at the assignment and waits until each has **listed** it;
//! 3. if no other live member claims or serves a range that overlaps the assignment,
//!    **claims** it (writes the claim), lists the Leases again, and if another live member's
//!    claim or served range overlaps it after all, **retracts** (clears the claim) and tries
//!    again next period;
//! 4. otherwise publishes the range as served, opens the gate for it and queues every key its
//!    caches hold in it.
//!
//! No key is reconciled by two replicas at once: a replica reconciles only inside the range it
//! publishes as served, and a served range is dropped only after its reconciles ended. Two
//! replicas that claim overlapping ranges both see each other's claim when they re-read
//! (whichever wrote last sees the other), so at most one goes on to serve; both may retract,
//! and retry once their views of the membership agree. So served ranges never overlap, while
//! claims may, for the moment between a claim and its retraction. A dead member's claim stops counting once its
//! Lease expired — by then it has stopped, because it stops within the renew deadline, which
//! is shorter. No key stays unowned: the assignment covers the hash space, every live member
//! eventually serves its part, and a dead member's part is reassigned within about one lease
//! duration. A member that leaves gracefully stops serving, then deletes its Lease.

mod cuts;
mod membership;

pub use crate::informer::shard::{
    Admission, HashRange, ListedRange, ShardGate, fnv1a64, key_hash, range, selector, split,
};
pub use cuts::Cuts;
pub use membership::Membership;

use std::time::Duration;

/// Annotation on a member's Lease: the range it serves now (`0x…-0x…`), empty when none.
pub const SERVING_ANNOTATION: &str = "kubewasm.dev/shard-serving";

/// Annotation on a member's Lease: the range it claims before it serves it (empty: none).
/// Claims may overlap for a moment (both claimants then retract); serving ranges never do.
pub const CLAIM_ANNOTATION: &str = "kubewasm.dev/shard-claim";

/// Annotation on the coordinator's Lease: the [`Cuts`] it computed for the membership.
pub const CUTS_ANNOTATION: &str = "kubewasm.dev/shard-cuts";

/// How a sharded host splits one plugin's keys between its replicas (its WasmPlugin status
/// says which).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Split {
    /// By namespace: each replica reconciles the namespaces whose hash falls in its range.
    ByNamespace,
    /// Not at all: the for kind (named) is cluster-scoped, so every key hashes as `""` and the
    /// one replica whose range holds `fnv1a64("")` reconciles all of them.
    OneReplica(String),
}

impl Split {
    /// The status condition's (status, reason, message) for this split.
    pub fn condition(&self) -> (bool, &'static str, String) {
        match self {
            Self::ByNamespace => {
                (true, "ByNamespace", "each replica reconciles the namespaces in its hash range".to_owned())
            }
            Self::OneReplica(kind) => (
                false,
                "ClusterScopedKind",
                format!(
                    "{kind} is cluster-scoped and not split: the replica whose range holds {:#018x} reconciles all of it",
                    fnv1a64("")
                ),
            ),
        }
    }
}

/// Why sharding could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The member Lease could not be held (bad timings, metrics).
    #[error("shard membership: {0}")]
    Lease(crate::leader::Error),
    /// A shard metric could not be registered.
    #[error("registering the shard metrics: {0}")]
    Metrics(prometheus::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where the member Leases live and how fast they move; timings as for leader election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Namespace of the member Leases.
    pub namespace: String,
    /// Prefix of the member Leases' names; replicas with the same prefix split the work.
    pub group: String,
    /// This replica's identity (`<hostname>_<random>` by default).
    pub identity: String,
    /// How long a member's Lease counts after its last observed renewal.
    pub lease_duration: Duration,
    /// How long a member keeps trying to renew before it exits.
    pub renew_deadline: Duration,
    /// Pause between membership checks and renewals.
    pub retry_period: Duration,
}

impl Config {
    /// Members of `group` in `namespace`, with the default identity and controller-runtime's
    /// leader-election timings (15 s / 10 s / 2 s).
    pub fn new(namespace: impl Into<String>, group: impl Into<String>) -> Self {
        let lease = crate::leader::Config::new("", "");
        Self {
            namespace: namespace.into(),
            group: group.into(),
            identity: lease.identity,
            lease_duration: lease.lease_duration,
            renew_deadline: lease.renew_deadline,
            retry_period: lease.retry_period,
        }
    }

    /// This member's Lease name: DNS-safe whatever the identity.
    pub fn lease_name(&self) -> String {
        format!("{}{:016x}", self.lease_prefix(), fnv1a64(&self.identity))
    }

    /// The prefix every member Lease of the group has.
    pub fn lease_prefix(&self) -> String {
        format!("{}-shard-", self.group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_lease_names_are_dns_labels_whatever_the_identity() {
        let mut config = Config::new("ns", "kubewasm");
        config.identity = "Host_Name.with_underscores_0123".into();
        let name = config.lease_name();
        assert!(name.starts_with("kubewasm-shard-") && name.len() == "kubewasm-shard-".len() + 16, "{name}");
        assert!(name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{name}");
    }
}
