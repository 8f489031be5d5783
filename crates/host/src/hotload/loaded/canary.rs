//! A plugin's dry-run canary in the plugins: its candidate loaded beside the serving version,
//! attached to the serving version's workers, replaced or stopped.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{ApplyError, CanarySlot, Candidate, LoadedPlugins, Origin};
use crate::canary::{Canary, Count, Findings};
use crate::controller::{self, PluginCache};
use crate::informer::InformerParams;
use crate::plugin::PluginConfig;
use crate::plugin::api::RecordingWriter;
use crate::plugin::api::{ApiWriter, CacheReader};
use crate::plugin::grants::KindRef;

impl LoadedPlugins {
    /// Runs `candidate` as a dry-run canary of the version of `name` that `origin` serves (or
    /// stops the canary, with `None`); a candidate already running with the same component and
    /// config is left alone. A candidate that does not load is reported and changes nothing:
    /// the serving version, and a canary already running, go on. Returns whether it changed.
    pub async fn set_canary(
        &self,
        name: &str,
        origin: &Origin,
        candidate: Option<Candidate>,
    ) -> Result<bool, ApplyError> {
        let slot = self.slot(name);
        let mut slot = slot.lock().await;
        let Some(current) = slot.as_mut().filter(|s| &s.origin == origin) else {
            return match candidate {
                Some(_) => Err(ApplyError::NothingServes(name.to_owned())),
                None => Ok(false),
            };
        };
        let Some(Candidate { wasm, config }) = candidate else {
            let stopped = current.canary.take().is_some();
            if stopped {
                current.controller.workers().set_canary(None);
                tracing::info!(plugin = %name, "canary stopped");
            }
            return Ok(stopped);
        };
        let sha256 = wasm.sha256().to_owned();
        if current.canary.as_ref().is_some_and(|c| c.sha256 == sha256 && c.config == config) {
            return Ok(false);
        }
        if let Some((_, _, reason, message)) =
            current.canary_rejected.as_ref().filter(|(sha, c, ..)| *sha == sha256 && *c == config)
        {
            return Err(ApplyError::CanaryRejected { reason, message: message.clone() });
        }
        let serving = KindRef::of(&current.controller.workers().plugin().registration().for_kind);
        let result = self.load_canary(name, wasm.bytes().clone(), sha256.clone(), config.clone(), &serving).await;
        let (canary, rbac_missing) = match result {
            Ok(loaded) => loaded,
            Err(err) => {
                if !err.is_transient() {
                    current.canary_rejected = Some((sha256, config, err.reason(), format!("{err:#}")));
                }
                self.metrics.rejected(name, "CanaryRejected");
                tracing::error!(plugin = %name, error = format!("{err:#}"), "canary candidate rejected; the serving version is untouched");
                return Err(err);
            }
        };
        current.controller.workers().set_canary(Some(canary.clone()));
        current.canary = Some(CanarySlot { sha256: sha256.clone(), config, canary, rbac_missing });
        // The candidate sees the keys the serving version reconciles: offer it every key now
        // rather than only those that change from here on.
        if self.options.requeue_on_swap {
            current.controller.requeue_all();
        }
        tracing::info!(plugin = %name, %sha256, serving_revision = current.revision, "canary candidate running beside the serving version");
        Ok(true)
    }

    /// Loads a candidate under the name `<name>/canary` (its metrics and logs apart from the
    /// serving version's; one reconcile at a time), its writes going to a recorder, its reads
    /// served by the shared informers; with what the plugin's identity lacks for its grants,
    /// which it would need once promoted.
    async fn load_canary(
        &self,
        name: &str,
        wasm: Arc<[u8]>,
        sha256: String,
        mut config: PluginConfig,
        serving: &KindRef,
    ) -> Result<(Arc<Canary>, Vec<String>), ApplyError> {
        config.max_concurrent = Some(1);
        let label = format!("{name}/canary");
        let cache = Arc::new(PluginCache::new(&label));
        let recorder = Arc::new(RecordingWriter::new(Some(cache.clone() as Arc<dyn CacheReader>)));
        let writer = recorder.clone() as Arc<dyn ApiWriter>;
        let plugin = self.runtime.load_digested(&label, wasm, sha256, config, cache.clone(), writer).await?;
        let candidate = KindRef::of(&plugin.registration().for_kind);
        if &candidate != serving {
            return Err(ApplyError::CanaryKind { serving: serving.clone(), candidate });
        }
        let mut informers = BTreeMap::new();
        for (kind, (gvk, selector)) in controller::wanted_informers(&plugin) {
            let params = InformerParams::default().labels(selector.as_deref().unwrap_or_default());
            let informer = self.ctx.factory.informer(&gvk, params).await;
            let informer = informer.map_err(|source| controller::Error::Informer { kind: kind.clone(), source })?;
            informers.insert(kind, informer);
        }
        controller::serve_reads(&plugin, &cache, &informers).map_err(|e| *e)?;
        let rbac_missing = self.review_rbac(name, &plugin).await.unwrap_or_default();
        let (metrics, name) = (self.metrics.clone(), name.to_owned());
        let count: Count = Arc::new(move |result| metrics.canary(&name, result));
        Ok((Arc::new(Canary::start(plugin, recorder, informers, count)), rbac_missing))
    }

    /// The canary of `name`, if one runs: its candidate's sha256 and what it found so far.
    pub async fn canary(&self, name: &str) -> Option<(String, Findings)> {
        let slot = self.slots.lock().get(name).cloned()?;
        let slot = slot.lock().await;
        let running = slot.as_ref()?.canary.as_ref()?;
        let findings = Findings { rbac_missing: running.rbac_missing.clone(), ..running.canary.findings() };
        Some((running.canary.sha256().to_owned(), findings))
    }

    /// Whether the canary of `name` runs exactly this component (by sha256) and config.
    pub async fn canary_serves(&self, name: &str, sha256: &str, config: &PluginConfig) -> bool {
        let Some(slot) = self.slots.lock().get(name).cloned() else { return false };
        let slot = slot.lock().await;
        slot.as_ref().and_then(|s| s.canary.as_ref()).is_some_and(|c| c.sha256 == sha256 && &c.config == config)
    }
}
