//! A WasmPlugin's OCI module: its tag resolved (or its pinned digest taken), the artifact
//! pulled or read from the disk cache, and what it resolved to kept for the status.

use std::time::Duration;

use oci_client::secrets::RegistryAuth;

use super::{NotServing, WasmPluginSource};
use crate::hotload::Module;
use crate::hotload::oci::signature::{self, PublicKey};
use crate::hotload::oci::{self, Pulled, credentials};
use crate::hotload::wasmplugin::{OciModule, OciStatus, WasmPlugin};

/// The key of a signature Secret holding the public key PEM (the name cosign gives it).
pub const SIGNATURE_SECRET_KEY: &str = "cosign.pub";

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

impl OciModule {
    /// The digest this module is pinned to (the reference's own, else `digest`), if any.
    pub fn pinned(&self) -> Option<String> {
        let own = self.reference.split_once('@').map(|(_, d)| d.to_owned());
        own.or_else(|| self.digest.clone())
    }
}

impl WasmPluginSource {
    /// The credentials of `module`'s pull secret for its registry (anonymous without one).
    async fn auth(&self, module: &OciModule) -> Result<RegistryAuth, oci::Error> {
        let Some(secret) = &module.pull_secret else { return Ok(RegistryAuth::Anonymous) };
        let registry = oci::parse(&module.reference)?.resolve_registry().to_owned();
        let secret = credentials::read(&self.client, &self.module_namespace, secret).await?;
        Ok(credentials::auth_for(&secret, &registry)?)
    }

    /// The public key `module`'s signature must verify with: none when it names none and the
    /// host does not require one. A Secret is read from the host's own namespace only.
    async fn signature_key(&self, module: &OciModule) -> Result<Option<PublicKey>, oci::Error> {
        let Some(named) = &module.signature else {
            return if self.puller.requires_signature() { Err(signature::Error::KeyMissing.into()) } else { Ok(None) };
        };
        let name = match (&named.public_key, &named.secret) {
            (Some(pem), _) => return Ok(Some(PublicKey::from_pem(pem, "publicKey")?)),
            (None, Some(secret)) => secret,
            (None, None) => {
                let message = "names neither publicKey nor secret".to_owned();
                return Err(signature::Error::KeyInvalid { what: "spec.module.oci.signature".into(), message }.into());
            }
        };
        let what = format!("Secret {}/{name}", self.module_namespace);
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(self.client.clone(), &self.module_namespace);
        let secret = api
            .get(name)
            .await
            .map_err(|e| signature::Error::KeyInvalid { what: what.clone(), message: e.to_string() })?;
        let bytes = secret.data.as_ref().and_then(|d| d.get(SIGNATURE_SECRET_KEY)).ok_or_else(|| {
            signature::Error::KeyInvalid { what: what.clone(), message: format!("no `{SIGNATURE_SECRET_KEY}` key") }
        })?;
        Ok(Some(PublicKey::from_pem(&String::from_utf8_lossy(&bytes.0), &what)?))
    }

    /// Checks `digest` of `module` is signed by the key it names, if it names one (or must).
    async fn verify(&self, module: &OciModule, digest: &str, auth: &RegistryAuth) -> Result<(), oci::Error> {
        match self.signature_key(module).await? {
            Some(key) => self.puller.verify(&module.reference, digest, auth, &key).await,
            None => Ok(()),
        }
    }

    /// The manifest digest `module` names now (no request for a pinned one). A reference with a
    /// digest and a `digest` that differs is refused.
    async fn resolve(&self, module: &OciModule, auth: &RegistryAuth) -> Result<String, oci::Error> {
        let own = module.reference.split_once('@').map(|(_, d)| d);
        if let (Some(own), Some(pinned)) = (own, &module.digest)
            && own != pinned
        {
            return Err(oci::Error::DigestMismatch {
                reference: module.reference.clone(),
                expected: pinned.clone(),
                got: own.to_owned(),
            });
        }
        match module.pinned() {
            Some(digest) => Ok(digest),
            None => self.puller.resolve(&module.reference, auth).await,
        }
    }

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
        let auth = self.auth(module).await?;
        let digest = match self.resolve(module, &auth).await {
            Ok(digest) => digest,
            Err(e) => {
                let last =
                    plugin.status.as_ref().and_then(|s| s.oci.as_ref()).filter(|s| s.reference == module.reference);
                let fallback = match last {
                    Some(last) if self.plugins.serving(name).await.is_none() && e.is_transient() => {
                        self.puller.cached(&last.digest).await.map(|wasm| (last.clone(), wasm))
                    }
                    _ => None,
                };
                let Some((status, wasm)) = fallback else { return Err(e) };
                // The signatures kept on disk with the module are checked again, offline.
                self.verify(module, &status.digest, &auth).await?;
                tracing::info!(plugin = name, digest = %status.digest, error = %e, "registry not answering: loading the digest last resolved from the disk cache");
                self.remember(name, status, &wasm);
                return Ok(Some(wasm));
            }
        };
        // Before the check for a version serving: a key added or changed applies to it too.
        self.verify(module, &digest, &auth).await?;
        let status = OciStatus { reference: module.reference.clone(), digest: digest.clone(), resolved_at: now() };
        let known = self.resolved.lock().get(name).cloned();
        if let Some(known) = known.filter(|k| k.status.digest == digest && k.status.reference == module.reference)
            && self.plugins.serves(name, &known.sha256, &plugin.spec.plugin_config()).await
        {
            self.resolved.lock().insert(name.to_owned(), Resolved { status, sha256: known.sha256 });
            return Ok(None);
        }
        let Pulled { module: wasm, cached, .. } = self.puller.pull(&module.reference, &digest, &auth).await?;
        tracing::info!(plugin = name, reference = %module.reference, %digest, cached, bytes = wasm.bytes().len(), "OCI module ready");
        self.remember(name, status, &wasm);
        Ok(Some(wasm))
    }

    /// The bytes of a canary's OCI module (resolved and pulled, nothing remembered).
    pub(super) async fn oci_bytes(&self, module: &OciModule) -> Result<Module, NotServing> {
        let pulled = async {
            let auth = self.auth(module).await?;
            let digest = self.resolve(module, &auth).await?;
            self.verify(module, &digest, &auth).await?;
            self.puller.pull(&module.reference, &digest, &auth).await
        };
        pulled.await.map(|p| p.module).map_err(|e| NotServing {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_is_pinned_by_its_references_digest_or_its_digest_field() {
        let digest = format!("sha256:{}", "b".repeat(64));
        let by_ref = OciModule { reference: format!("r.example/p@{digest}"), ..Default::default() };
        assert_eq!(by_ref.pinned(), Some(digest.clone()));
        let by_field =
            OciModule { reference: "r.example/p:v1".into(), digest: Some(digest.clone()), ..Default::default() };
        assert_eq!(by_field.pinned(), Some(digest));
        assert_eq!(OciModule { reference: "r.example/p:v1".into(), ..Default::default() }.pinned(), None);
    }
}
