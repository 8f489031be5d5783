//! Dry-run canaries: a candidate version of a plugin reconciles the keys the serving version
//! reconciled, with its writes recorded instead of sent, and the host reports where the two
//! would write differently.
//!
//! The candidate runs in one task of its own per plugin, after the serving reconcile of a key
//! has finished: the serving worker only hands over the key and the writes it logged (a
//! `try_send`; when the candidate lags [`QUEUE`] keys behind, comparisons are skipped and
//! counted), so the candidate never delays a key's completion, and its traps, timeouts and
//! memory only cost its own reconciles, inside its own limits and instance share. It reads the
//! same shared caches, so it sees the cluster as the serving reconcile left it: idempotent
//! (apply-based) plugins compare cleanly; one that creates only what is missing may differ.

pub mod compare;
pub mod tap;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt as _;
use parking_lot::Mutex;
use tokio::sync::mpsc;

pub use compare::{Side, Verdict};
pub use tap::{TapWriter, WriteLog};

use crate::informer::Informer;
use crate::plugin::api::RecordingWriter;
use crate::plugin::grants::KindRef;
use crate::plugin::{ObjectKey, Plugin};

/// Serving reconciles waiting for the candidate; past it a comparison is skipped. 64.
pub const QUEUE: usize = 64;

/// What the serving version did for one key, handed to the candidate.
#[derive(Debug)]
pub struct Served {
    /// The key.
    pub key: ObjectKey,
    /// Its attempt number.
    pub attempt: u32,
    /// Its outcome and writes.
    pub side: Side,
}

/// The latest difference found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// 1, 2, … per difference found by this canary.
    pub seq: u64,
    /// The key.
    pub key: String,
    /// `differ` or `failed`.
    pub result: &'static str,
    /// The diff (serving → candidate), or the candidate's error.
    pub detail: String,
    /// When it was found (RFC 3339).
    pub time: String,
}

/// What a canary has found so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Reconciles the candidate would have written alike.
    pub same: u64,
    /// Reconciles where its writes differ.
    pub differ: u64,
    /// Reconciles where it failed and the serving version did not.
    pub failed: u64,
    /// Comparisons skipped (the candidate lagged behind, or its caches had not synced).
    pub skipped: u64,
    /// The latest difference.
    pub last_difference: Option<Difference>,
    /// What the plugin's identity lacks for the candidate's grants (reviewed when the candidate
    /// loads; empty when nothing is, or plugins are not impersonated): its writes would be
    /// forbidden once it serves.
    pub rbac_missing: Vec<String>,
}

/// Counts a comparison under `kubewasm_canary_reconciles_total{plugin, result}`.
pub type Count = Arc<dyn Fn(&'static str) + Send + Sync>;

/// A running candidate version of one plugin.
pub struct Canary {
    sha256: String,
    tx: mpsc::Sender<Served>,
    findings: Arc<Mutex<Findings>>,
    count: Count,
    task: tokio::task::AbortHandle,
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the candidate needs in its task.
struct Candidate {
    plugin: Plugin,
    recorder: Arc<RecordingWriter>,
    informers: BTreeMap<KindRef, Informer>,
    findings: Arc<Mutex<Findings>>,
    count: Count,
}

impl Canary {
    /// Starts comparing `plugin` (loaded over `cache` with `recorder` as its writer, reading
    /// from `informers`) with the serving version; `count` counts each comparison.
    pub(crate) fn start(
        plugin: Plugin,
        recorder: Arc<RecordingWriter>,
        informers: BTreeMap<KindRef, Informer>,
        count: Count,
    ) -> Self {
        let sha256 = plugin.sha256().to_owned();
        let (tx, rx) = mpsc::channel(QUEUE);
        let findings = Arc::new(Mutex::new(Findings::default()));
        let candidate = Candidate { plugin, recorder, informers, findings: findings.clone(), count: count.clone() };
        let task = tokio::spawn(candidate.run(rx)).abort_handle();
        Self { sha256, tx, findings, count, task }
    }

    /// sha256 of the candidate's component.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// What it has found so far.
    pub fn findings(&self) -> Findings {
        self.findings.lock().clone()
    }
}

/// Where a serving worker hands each reconcile it served once its key is settled: a [`Canary`]
/// (or a test's stand-in).
pub trait Offer: Send + Sync {
    /// Hands the serving version's reconcile of a key over without waiting.
    fn offer(&self, served: Served);
}

impl Offer for Canary {
    /// Hands it to the candidate; skipped (and counted) when the candidate lags [`QUEUE`] keys
    /// behind.
    fn offer(&self, served: Served) {
        if self.tx.try_send(served).is_err() {
            self.findings.lock().skipped += 1;
            (self.count)("skipped");
        }
    }
}

impl Candidate {
    async fn run(self, mut rx: mpsc::Receiver<Served>) {
        let name = self.plugin.name().to_owned();
        while let Some(served) = rx.recv().await {
            if !self.informers.values().all(Informer::has_synced) {
                self.findings.lock().skipped += 1;
                (self.count)("skipped");
                continue;
            }
            self.recorder.take();
            let reconcile = self.plugin.reconcile(&served.key, served.attempt);
            // A host-side panic costs this comparison only, as in a serving worker.
            let result = AssertUnwindSafe(reconcile).catch_unwind().await;
            let error = match result {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("the host panicked during the candidate's reconcile".to_owned()),
            };
            let candidate = Side { error, writes: self.recorder.take() };
            let verdict = compare::compare(&served.side, &candidate);
            let result = verdict.label();
            (self.count)(result);
            let mut findings = self.findings.lock();
            match verdict {
                Verdict::Same => findings.same += 1,
                Verdict::Differ(detail) | Verdict::Failed(detail) => {
                    if result == "failed" {
                        findings.failed += 1;
                    } else {
                        findings.differ += 1;
                    }
                    let seq = findings.last_difference.as_ref().map_or(1, |d| d.seq + 1);
                    let time = k8s_openapi::jiff::Timestamp::now()
                        .round(k8s_openapi::jiff::Unit::Second)
                        .unwrap_or_default()
                        .to_string();
                    // Logged at the 1st, 2nd, 4th, 8th, … difference: bounded however many differ.
                    if seq.is_power_of_two() {
                        tracing::info!(plugin = %name, key = %served.key, result, differences = seq, detail = %detail, "canary candidate differs from the serving version");
                    }
                    findings.last_difference =
                        Some(Difference { seq, key: served.key.to_string(), result, detail, time });
                }
            }
        }
    }
}
