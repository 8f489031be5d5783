//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's algorithm.
//!
//! Hand-written: `kube-lease-manager` (the maintained crate on kube 5) has no renew deadline — a
//! holder that cannot reach the API server goes on believing it leads after its lease expired and
//! another replica took it — and counts whole seconds from the Lease's own timestamps (clock skew);
//! `kube-leader-election` is on kube 4. client-go's rules, kept here: a lease is expired when its
//! record has not changed for `leaseDurationSeconds` *as observed on our own clock*; the leader
//! renews every retry period and gives up after failing for the renew deadline; updates carry the
//! resourceVersion, so two candidates never both win; release (on graceful shutdown) clears the
//! holder so the next candidate takes over at once.

mod elector;

use std::time::Duration;

use elector::Elector;

use kube::Client;
use kube::api::Api;
use prometheus::{IntGaugeVec, Opts, Registry};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Where a pod finds its namespace (mounted with its service-account token).
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// The Lease namespace outside a pod when `POD_NAMESPACE` is not set: the one `deploy/base` creates.
pub const DEFAULT_NAMESPACE: &str = "kubewasm-system";

/// Why leader election stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The lease was not renewed within the renew deadline: another replica may lead by now.
    #[error("lost the lease {lease}: not renewed within {renew_deadline:?}")]
    Lost {
        /// `namespace/name` of the Lease.
        lease: String,
        /// The renew deadline that passed.
        renew_deadline: Duration,
    },
    /// The timings break client-go's rules (lease duration > renew deadline > 1.2 × retry period > 0).
    #[error("invalid leader election timings: {0}")]
    Timings(String),
    /// The election task ended without releasing or losing the lease (it panicked).
    #[error("the leader election task for {0} stopped unexpectedly")]
    Stopped(String),
    /// The `leader_election_master_status` gauge could not be registered.
    #[error("registering the leader election metric: {0}")]
    Metrics(prometheus::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to elect on and how fast; defaults are controller-runtime's (15 s / 10 s / 2 s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This candidate's holder identity; default `<hostname>_<random>` (controller-runtime's form).
    pub identity: String,
    /// How long followers wait after the last observed renewal before taking over.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leading.
    pub renew_deadline: Duration,
    /// Pause between attempts to acquire or renew.
    pub retry_period: Duration,
}

/// client-go's `JitterFactor`: acquire attempts wait up to 1.2 × the retry period.
pub(crate) const JITTER_FACTOR: f64 = 1.2;

impl Config {
    /// The Lease `namespace/name`, with the default identity and timings.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Sets the holder identity.
    #[must_use]
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// Sets the lease duration, renew deadline and retry period.
    #[must_use]
    pub fn timings(mut self, lease_duration: Duration, renew_deadline: Duration, retry_period: Duration) -> Self {
        (self.lease_duration, self.renew_deadline, self.retry_period) = (lease_duration, renew_deadline, retry_period);
        self
    }

    /// client-go's checks (`NewLeaderElector`).
    fn validate(&self) -> Result<()> {
        let fail = |why: &str| Err(Error::Timings(format!("{why} ({self:?})")));
        if self.retry_period.is_zero() {
            return fail("the retry period must be positive");
        }
        if self.lease_duration <= self.renew_deadline {
            return fail("the lease duration must be longer than the renew deadline");
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return fail("the renew deadline must be longer than 1.2 x the retry period");
        }
        if self.lease_duration.as_secs() == 0 || i32::try_from(self.lease_duration.as_secs()).is_err() {
            return fail("the lease duration must be between 1 s and i32::MAX s");
        }
        Ok(())
    }

    pub(crate) fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The pod's namespace: `$POD_NAMESPACE`, else the service account's namespace file, else
/// [`DEFAULT_NAMESPACE`].
pub fn default_namespace() -> String {
    pick_namespace(std::env::var("POD_NAMESPACE").ok(), || std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE).ok())
}

fn pick_namespace(env: Option<String>, file: impl FnOnce() -> Option<String>) -> String {
    let clean = |ns: String| Some(ns.trim().to_owned()).filter(|ns| !ns.is_empty());
    env.and_then(clean).or_else(|| file().and_then(clean)).unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned())
}

/// `<hostname>_<16 random hex digits>`: the pod name in a cluster, unique per process.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kubewasm".to_owned());
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if random.is_err() {
        bytes = u64::from(std::process::id()).to_be_bytes();
    }
    format!("{host}_{}", hex::encode(bytes))
}

/// Whether workers may run: always without leader election, else only while this replica leads.
#[derive(Clone, Debug, Default)]
pub struct LeaderGate(Option<watch::Receiver<bool>>);

impl LeaderGate {
    /// A gate open while `leading` reads true (an election of one's own, or a test's).
    pub fn new(leading: watch::Receiver<bool>) -> Self {
        Self(Some(leading))
    }

    /// Whether this replica may run workers now.
    pub fn is_leader(&self) -> bool {
        self.0.as_ref().is_none_or(|rx| *rx.borrow())
    }

    /// Resolves once this replica leads (at once without leader election); never, if the
    /// election ended without it leading.
    pub async fn leading(&self) {
        if let Some(rx) = &self.0 {
            let mut rx = rx.clone();
            if rx.wait_for(|leading| *leading).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// A running election: a task that acquires the Lease, then renews it until released or lost.
pub struct Election {
    gate: LeaderGate,
    task: Option<JoinHandle<Result<()>>>,
    release: CancellationToken,
    lease: String,
}

impl Election {
    /// Starts campaigning for `config`'s Lease and registers `leader_election_master_status`.
    pub fn start(client: Client, config: Config, registry: &Registry) -> Result<Self> {
        config.validate()?;
        let opts = Opts::new("leader_election_master_status", "1 while this replica holds the leader lease, else 0");
        let family = IntGaugeVec::new(opts, &["name"]).map_err(Error::Metrics)?;
        registry.register(Box::new(family.clone())).map_err(Error::Metrics)?;
        let status = family.with_label_values(&[config.name.as_str()]);
        status.set(0);
        let (leading, rx) = watch::channel(false);
        let release = CancellationToken::new();
        let lease = config.lease();
        tracing::info!(%lease, identity = %config.identity, "leader election: campaigning");
        let api = Api::namespaced(client, &config.namespace);
        let elector = Elector::new(api, config, leading, status);
        let task = tokio::spawn(elector.run(release.clone()));
        Ok(Self { gate: LeaderGate(Some(rx)), task: Some(task), release, lease })
    }

    /// The gate controllers wait on.
    pub fn gate(&self) -> LeaderGate {
        self.gate.clone()
    }

    /// Resolves when leadership is lost (or the elector task died); pending after `release`.
    pub async fn lost(&mut self) -> Error {
        let Some(task) = self.task.as_mut() else { return std::future::pending().await };
        let result = task.await;
        self.task = None;
        match result {
            Ok(Err(e)) => e,
            _ => Error::Stopped(self.lease.clone()),
        }
    }

    /// Stops campaigning and, if this replica leads, releases the Lease so another takes over
    /// at once (controller-runtime's `ReleaseOnCancel`). Call after the workers stopped.
    pub async fn release(mut self) {
        self.release.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_namespace_comes_from_pod_namespace_then_the_service_account_file_then_the_default() {
        let file = || Some("from-file\n".to_owned());
        assert_eq!(pick_namespace(Some("from-env".into()), file), "from-env");
        assert_eq!(pick_namespace(None, file), "from-file");
        assert_eq!(pick_namespace(Some(" ".into()), || None), DEFAULT_NAMESPACE);
    }

    #[test]
    fn timings_follow_client_go_rules() {
        let config = Config::new("ns", "lease");
        assert!(config.validate().is_ok(), "controller-runtime's defaults are valid");
        let secs = Duration::from_secs;
        for (lease, renew, retry) in [(10, 10, 2), (15, 2, 2), (15, 10, 0), (0, 0, 0)] {
            let bad = config.clone().timings(secs(lease), secs(renew), secs(retry));
            assert!(matches!(bad.validate(), Err(Error::Timings(_))), "{lease}/{renew}/{retry} accepted");
        }
    }

    #[test]
    fn identities_name_the_host_and_differ_between_candidates() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        assert!(a.rsplit_once('_').is_some_and(|(host, random)| !host.is_empty() && random.len() == 16), "{a}");
    }

    #[tokio::test]
    async fn without_an_election_the_gate_is_open_and_with_one_it_opens_when_leading() {
        let open = LeaderGate::default();
        assert!(open.is_leader());
        open.leading().await;

        let (tx, rx) = watch::channel(false);
        let gate = LeaderGate(Some(rx));
        assert!(!gate.is_leader());
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.leading().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "a follower's workers wait");
        tx.send_replace(true);
        waiter.await.unwrap();
        assert!(gate.is_leader());
    }
}
