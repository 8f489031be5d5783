//! A plugin file's OCI module: a `<name>.yaml` with no `<name>.wasm` beside it naming
//! `module: {oci: …}`, with the fields and meaning of a WasmPlugin's `spec.module.oci`, got
//! through the same [`Registries`] (pull Secret, signature key, `--oci-require-signature`).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use serde::Deserialize;
use tokio::time::Instant;

use crate::hotload::Module;
use crate::hotload::oci::{self, Registries};
use crate::hotload::wasmplugin::OciModule;
use crate::plugin::PluginConfig;

/// The shortest re-resolve interval a plugin file may ask for: a WasmPlugin's schema minimum.
pub const MIN_REFRESH: Duration = Duration::from_secs(10);

/// How soon a module that failed for a reason that may pass (registry away, tag not pushed yet,
/// Secret not made) is tried again, at most: the directory's rescan interval.
const RETRY: Duration = super::RESCAN_INTERVAL;

/// A plugin file's `module`: where its component comes from when no `.wasm` is beside it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileModule {
    /// A wasm artifact in an OCI registry.
    oci: OciModule,
}

/// Parses a plugin file's config text: its [`PluginConfig`] and, if it names one, its OCI
/// module. Without `module` the text goes to [`PluginConfig::from_yaml`] as it is.
pub fn parse(text: &str) -> anyhow::Result<(PluginConfig, Option<OciModule>)> {
    let mut value: serde_yaml::Value = serde_yaml::from_str(text)?;
    let Some(module) = value.as_mapping_mut().and_then(|m| m.remove("module")) else {
        return Ok((PluginConfig::from_yaml(text)?, None));
    };
    let module: FileModule = serde_yaml::from_value(module).context("in `module`")?;
    let rest =
        if value.as_mapping().is_some_and(|m| m.is_empty()) { String::new() } else { serde_yaml::to_string(&value)? };
    Ok((PluginConfig::from_yaml(&rest)?, Some(module.oci)))
}

/// Whether config `text` names a `module` (so the file is a plugin without a `.wasm`).
pub fn names_module(text: &str) -> bool {
    serde_yaml::from_str::<serde_yaml::Value>(text)
        .ok()
        .and_then(|v| v.as_mapping().map(|m| m.contains_key("module")))
        .unwrap_or(false)
}

/// What one plugin file's OCI module last came to.
#[derive(Clone, Debug, Default)]
struct State {
    /// The digest of the version applied from it.
    digest: Option<String>,
    /// When to resolve it again; `None`: only when the file changes.
    due: Option<Instant>,
    /// The reason of the failure last reported, so a failure retried is logged once.
    reported: Option<&'static str>,
}

/// The OCI side of the directory source: the registries, the default refresh, and per file
/// what its module came to.
pub(super) struct OciFiles {
    registries: Registries,
    refresh: Duration,
    state: HashMap<String, State>,
}

/// What a pass makes of a plugin file's OCI module.
pub(super) enum Outcome {
    /// Its component at a digest that is not the one applied: apply it.
    New {
        /// The component.
        wasm: Module,
        /// The manifest digest it came from.
        digest: String,
    },
    /// The digest applied is still the one it names.
    Same,
}

impl OciFiles {
    pub(super) fn new(registries: Registries, refresh: Duration) -> Self {
        Self { registries, refresh, state: HashMap::new() }
    }

    /// Whether `name`'s module is due for another resolution.
    pub(super) fn due(&self, name: &str) -> bool {
        self.state.get(name).and_then(|s| s.due).is_some_and(|due| due <= Instant::now())
    }

    /// The earliest time a module is due, for the watcher to wake then.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.state.values().filter_map(|s| s.due).min()
    }

    /// Stops resolving `name`'s module on a timer (its file no longer names one it can use:
    /// the next change of the file decides).
    pub(super) fn idle(&mut self, name: &str) {
        if let Some(state) = self.state.get_mut(name) {
            state.due = None;
        }
    }

    /// Puts `name`'s due resolution off by [`RETRY`] (its file could not be read this pass), so
    /// a due time in the past cannot wake the watcher again at once.
    pub(super) fn postpone(&mut self, name: &str) {
        if let Some(due) = self.state.get_mut(name).and_then(|s| s.due.as_mut()) {
            *due = Instant::now() + RETRY;
        }
    }

    /// Forgets the files not in `names`.
    pub(super) fn retain(&mut self, names: &[&str]) {
        self.state.retain(|name, _| names.contains(&name.as_str()));
    }

    /// Resolves `module` of plugin file `name` and checks its signature; pulls it when its
    /// digest is not the one applied, or when `changed` (the file changed: its config is to be
    /// applied with the component). A failure is counted (`kubewasm_plugin_rejected_versions_total`,
    /// as a refused plugin file) and logged when its reason is news; the version serving is left.
    pub(super) async fn module(
        &mut self,
        plugins: &crate::hotload::LoadedPlugins,
        name: &str,
        module: &OciModule,
        changed: bool,
    ) -> Result<Outcome, oci::Error> {
        let refresh = match module.refresh_interval_seconds {
            Some(secs) => Duration::from_secs(secs).max(MIN_REFRESH),
            None => self.refresh,
        };
        let pinned = module.pinned().is_some();
        let result = self.resolve_and_pull(name, module, changed).await;
        let state = self.state.entry(name.to_owned()).or_default();
        match &result {
            Ok(_) => {
                state.reported = None;
                state.due = (!pinned).then(|| Instant::now() + refresh);
            }
            Err(e) => {
                plugins.rejected(name, e.reason());
                if state.reported != Some(e.reason()) {
                    tracing::error!(plugin = name, reference = %module.reference, reason = e.reason(), error = %e, "OCI module of the plugin file not pulled; the version serving keeps serving");
                }
                state.reported = Some(e.reason());
                // The next success applies what it gets, even the digest applied before: the
                // file may have changed (settings) while this one failed.
                state.digest = None;
                state.due = e.is_transient().then(|| Instant::now() + refresh.min(RETRY));
            }
        }
        result
    }

    async fn resolve_and_pull(&mut self, name: &str, module: &OciModule, changed: bool) -> Result<Outcome, oci::Error> {
        let auth = self.registries.auth(module).await?;
        let digest = self.registries.resolve(module, &auth).await?;
        // Before the check for the digest applied: a key added or changed applies to it too.
        self.registries.verify(module, &digest, &auth).await?;
        let state = self.state.entry(name.to_owned()).or_default();
        if !changed && state.digest.as_deref() == Some(digest.as_str()) {
            return Ok(Outcome::Same);
        }
        let pulled = self.registries.puller().pull(&module.reference, &digest, &auth).await?;
        tracing::info!(plugin = name, reference = %module.reference, %digest, cached = pulled.cached, bytes = pulled.module.bytes().len(), "OCI module of the plugin file ready");
        Ok(Outcome::New { wasm: pulled.module, digest })
    }

    /// Records that the version from `digest` was applied for `name` (or, `None`, that none was).
    pub(super) fn applied(&mut self, name: &str, digest: Option<String>) {
        self.state.entry(name.to_owned()).or_default().digest = digest;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registries that are never reached: the API server and the registry are a closed port.
    fn unreachable_registries() -> Registries {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        Registries::new(oci::Puller::new(&oci::Options::default()), client, "kubewasm-system")
    }

    #[tokio::test]
    async fn a_file_no_longer_naming_a_usable_module_stops_waking_the_watcher_and_an_unread_one_waits_a_retry() {
        let mut files = OciFiles::new(unreachable_registries(), Duration::from_secs(60));
        let now = Instant::now();
        files.state.insert("p".into(), State { due: Some(now), ..State::default() });
        assert!(files.due("p") && files.next_due() == Some(now));
        files.postpone("p");
        assert!(!files.due("p"), "a file that could not be read is tried again after RETRY, not at once");
        assert!(files.next_due().is_some_and(|due| due >= now + RETRY));
        files.idle("p");
        assert!(!files.due("p") && files.next_due().is_none(), "an idle module wakes the watcher no more");
        files.retain(&[]);
        assert!(files.state.is_empty(), "a file gone is forgotten");
    }

    #[test]
    fn a_config_naming_an_oci_module_keeps_its_strict_plugin_config() {
        let text = "module:\n  oci: {ref: r.example/p:v1, pullSecret: pull, refreshIntervalSeconds: 60}\nlimits: {deadlineMs: 5000}\n";
        assert!(names_module(text));
        let (config, module) = parse(text).unwrap();
        let module = module.expect("the module");
        assert_eq!((module.reference.as_str(), module.pull_secret.as_deref()), ("r.example/p:v1", Some("pull")));
        assert_eq!(module.refresh_interval_seconds, Some(60));
        assert_eq!(config.limits, PluginConfig::from_yaml("limits: {deadlineMs: 5000}\n").unwrap().limits);
        assert!(parse("module: {oci: {ref: r/p:v1, typo: 1}}\n").is_err(), "unknown fields in module are errors");
        assert!(parse("module: {oci: {ref: r/p:v1}}\nlimitz: {}\n").is_err(), "and in the rest of the config");
        assert!(parse("module: {url: x}\n").is_err(), "only oci is a module of a plugin file");
        assert!(parse("module: {oci: {ref: r/p:v1}}\n").unwrap().0 == PluginConfig::default());
        assert!(!names_module("limits: {deadlineMs: 5000}\n") && !names_module(""));
        assert!(parse("").unwrap().1.is_none());
    }
}
