//! A WasmPlugin's OCI module: its tag resolved (or its pinned digest taken), the artifact
//! pulled or read from the disk cache, and what it resolved to kept for the status.

use std::time::Duration;

use super::{NotServing, WasmPluginSource};
use crate::hotload::Module;
use crate::hotload::oci::{self, Pulled};
use crate::hotload::wasmplugin::{OciModule, OciStatus, WasmPlugin};

/// How often an unpinned tag is resolved again unless the WasmPlugin or `--oci-refresh-seconds`
/// says otherwise: 5 minutes (Flux's OCIRepository examples poll at 5m; a push is seen within
/// one interval, and a registry gets one HEAD per plugin per interval).
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(300);

/// What one WasmPlugin's OCI module last resolved to, and the component sha256 it gave.
#[derive(Clone, Debug)]
pub(super) struct Resolved {
    pub(super) status: OciStatus,
    pub(super) sha256: String,
}

impl WasmPluginSource {
    /// The bytes of `plugin`'s OCI module for a load, or `None` when the version serving came
    /// from the digest it resolves to now. On a failure to resolve with nothing serving (a host
    /// starting while the registry is away), the digest the status last reported is loaded from
    /// the disk cache if it is there.
    pub(super) async fn oci_module(
        &self,
        name: &str,
        plugin: &WasmPlugin,
        module: &OciModule,
    ) -> Result<Option<Module>, NotServing> {
        let result = self.oci_pull(name, plugin, module).await;
        if let Err(e) = &result {
            self.plugins.rejected(name, e.reason());
            tracing::warn!(plugin = name, reference = %module.reference, reason = e.reason(), error = %e, "OCI module not pulled");
        }
        result.map_err(|e| NotServing { reason: e.reason(), message: e.to_string(), retry: e.is_transient() })
    }

    async fn oci_pull(
        &self,
        name: &str,
        plugin: &WasmPlugin,
        module: &OciModule,
    ) -> Result<Option<Module>, oci::Error> {
        let auth = self.registries.auth(module).await?;
        let digest = match self.registries.resolve(module, &auth).await {
            Ok(digest) => digest,
            Err(e) => {
                let last =
                    plugin.status.as_ref().and_then(|s| s.oci.as_ref()).filter(|s| s.reference == module.reference);
                let fallback = match last {
                    Some(last) if self.plugins.serving(name).await.is_none() && e.is_transient() => {
                        self.registries.puller().cached(&last.digest).await.map(|wasm| (last.clone(), wasm))
                    }
                    _ => None,
                };
                let Some((status, wasm)) = fallback else { return Err(e) };
                // The signatures kept on disk with the module are checked again, offline.
                self.registries.verify(module, &status.digest, &auth).await?;
                tracing::info!(plugin = name, digest = %status.digest, error = %e, "registry not answering: loading the digest last resolved from the disk cache");
                self.remember(name, status, &wasm);
                return Ok(Some(wasm));
            }
        };
        // Before the check for a version serving: a key added or changed applies to it too.
        self.registries.verify(module, &digest, &auth).await?;
        let status = OciStatus { reference: module.reference.clone(), digest: digest.clone(), resolved_at: now() };
        let known = self.resolved.lock().get(name).cloned();
        if let Some(known) = known.filter(|k| k.status.digest == digest && k.status.reference == module.reference)
            && self.plugins.serves(name, &known.sha256, &plugin.spec.plugin_config()).await
        {
            self.resolved.lock().insert(name.to_owned(), Resolved { status, sha256: known.sha256 });
            return Ok(None);
        }
        let Pulled { module: wasm, cached, .. } =
            self.registries.puller().pull(&module.reference, &digest, &auth).await?;
        tracing::info!(plugin = name, reference = %module.reference, %digest, cached, bytes = wasm.bytes().len(), "OCI module ready");
        self.remember(name, status, &wasm);
        Ok(Some(wasm))
    }

    /// The bytes of a canary's OCI module (resolved and pulled, nothing remembered).
    pub(super) async fn oci_bytes(&self, module: &OciModule) -> Result<Module, NotServing> {
        self.registries.fetch(module).await.map(|p| p.module).map_err(|e| NotServing {
            reason: e.reason(),
            message: e.to_string(),
            retry: e.is_transient(),
        })
    }

    fn remember(&self, name: &str, status: OciStatus, wasm: &Module) {
        let sha256 = wasm.sha256().to_owned();
        self.resolved.lock().insert(name.to_owned(), Resolved { status, sha256 });
    }

    /// The status of `name`'s OCI module, if it has one and it was resolved.
    pub(super) fn oci_status(&self, name: &str, plugin: Option<&WasmPlugin>) -> Option<OciStatus> {
        let module = plugin?.spec.module.oci.as_ref()?;
        let resolved = self.resolved.lock().get(name).cloned();
        match resolved {
            Some(r) if r.status.reference == module.reference => Some(r.status),
            // Not resolved by this host yet (or it failed): what the status said before.
            _ => plugin?.status.as_ref()?.oci.clone(),
        }
    }

    /// When to resolve `plugin`'s tag again, if it has an unpinned OCI module and is not paused.
    pub(super) fn refresh(&self, plugin: Option<&WasmPlugin>) -> Option<Duration> {
        let plugin = plugin?;
        let module = plugin.spec.module.oci.as_ref()?;
        if module.pinned().is_some() || plugin.spec.paused {
            return None;
        }
        Some(module.refresh_interval_seconds.map(Duration::from_secs).unwrap_or(self.oci_refresh))
    }

    /// Forgets what `name` resolved to (it was deleted).
    pub(super) fn forget_oci(&self, name: &str) {
        self.resolved.lock().remove(name);
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().round(k8s_openapi::jiff::Unit::Second).unwrap_or_default().to_string()
}
