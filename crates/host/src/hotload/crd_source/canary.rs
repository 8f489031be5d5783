//! The dry-run canary of a WasmPlugin (`spec.canary`): its candidate started, kept, replaced or
//! stopped through the plugins, and its findings reported in `status.canary` and as Events.

use std::time::Duration;

use super::{Informer, STATUS_MANAGER, WasmPluginSource, gvk};
use crate::canary::Findings;
use crate::hotload::loaded::{Candidate, Origin};
use crate::hotload::wasmplugin::{CanaryDifference, CanaryStatus, WasmPlugin};
use crate::plugin::api::{EventRecord, MAX_NOTE, ObjectRef};

/// How often a running canary's findings are written to its WasmPlugin's status (only when
/// they changed), with an Event for a new difference: at most one status write and one Event
/// per canary per interval. 3 s.
pub const CANARY_REPORT_INTERVAL: Duration = Duration::from_secs(3);

/// Reason of the Event that reports a canary's new difference.
pub const CANARY_DIFFERS: &str = "CanaryDiffers";

/// Reason of the Event that reports a canary's reconcile that failed where the serving one did not.
pub const CANARY_FAILED: &str = "CanaryFailed";

impl WasmPluginSource {
    /// Starts, keeps, replaces or stops the canary `spec.canary` asks for; why its candidate is
    /// not running, if it is not.
    pub(super) async fn canary(&self, name: &str, plugin: &WasmPlugin, modules: &Informer) -> Option<String> {
        let (Some(spec), Some(config)) = (&plugin.spec.canary, plugin.spec.canary_config()) else {
            let _ = self.plugins.set_canary(name, &Origin::WasmPlugin, None).await;
            self.evented.lock().remove(name);
            return None;
        };
        let module = spec.module.as_ref().unwrap_or(&plugin.spec.module);
        if let Some(url) = &module.url
            && self.plugins.canary_serves(name, &url.sha256, &config).await
        {
            return None;
        }
        let wasm = match self.module_bytes(module, plugin.spec.engine.is_some(), modules).await {
            Ok(wasm) => wasm,
            Err(problem) => return Some(format!("{}: {}", problem.reason, problem.message)),
        };
        let candidate = Some(Candidate { wasm, config });
        match self.plugins.set_canary(name, &Origin::WasmPlugin, candidate).await {
            Ok(_) => None,
            Err(e) => Some(format!("{}: {e:#}", e.reason())),
        }
    }

    /// Sends an Event on the WasmPlugin for the canary's latest difference, if it is new.
    pub(super) fn announce(&self, name: &str, sha256: &str, findings: &Findings) {
        let Some(difference) = &findings.last_difference else { return };
        let seen = (sha256.to_owned(), difference.seq);
        if self.evented.lock().insert(name.to_owned(), seen.clone()) == Some(seen) {
            return;
        }
        let reason = if difference.result == "failed" { CANARY_FAILED } else { CANARY_DIFFERS };
        let short = &sha256[..sha256.len().min(12)];
        let mut note = format!("candidate {short} on {}: {}", difference.key, difference.detail);
        note.truncate(note.floor_char_boundary(MAX_NOTE));
        let regarding = ObjectRef { kind: gvk(), namespace: None, name: name.to_owned() };
        self.events.publish_own(
            STATUS_MANAGER,
            &EventRecord { regarding, warning: true, reason: reason.into(), note, by_host: true },
        );
    }
}

/// The canary part of a WasmPlugin's status.
pub(super) fn canary_status(running: Option<&(String, Findings)>, last_error: Option<String>) -> CanaryStatus {
    let Some((sha256, findings)) = running else { return CanaryStatus { last_error, ..Default::default() } };
    CanaryStatus {
        sha256: Some(sha256.clone()),
        same: findings.same,
        differ: findings.differ,
        failed: findings.failed,
        skipped: findings.skipped,
        last_difference: findings.last_difference.as_ref().map(|d| CanaryDifference {
            key: d.key.clone(),
            result: d.result.to_owned(),
            diff: d.detail.clone(),
            time: d.time.clone(),
        }),
        last_error,
        rbac_missing: findings.rbac_missing.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::Difference;

    #[test]
    fn the_canary_status_shows_the_counts_and_latest_difference_or_only_why_it_does_not_run() {
        let difference = Difference {
            seq: 2,
            key: "a/b".into(),
            result: "differ",
            detail: "--- serving".into(),
            time: "2026-01-01T00:00:00Z".into(),
        };
        let findings = Findings { same: 3, differ: 2, last_difference: Some(difference), ..Findings::default() };
        let status = canary_status(Some(&("abc".into(), findings)), None);
        assert_eq!((status.sha256.as_deref(), status.same, status.differ), (Some("abc"), 3, 2));
        let shown = status.last_difference.unwrap();
        assert_eq!((shown.key.as_str(), shown.result.as_str(), shown.diff.as_str()), ("a/b", "differ", "--- serving"));
        let rejected = canary_status(None, Some("LoadFailed: not a WebAssembly binary".into()));
        assert_eq!(rejected, CanaryStatus { last_error: rejected.last_error.clone(), ..CanaryStatus::default() });
        assert!(rejected.sha256.is_none());
    }
}
