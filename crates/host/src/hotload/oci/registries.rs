//! An OCI module as either source names it (a WasmPlugin's `spec.module.oci`, a plugin file's
//! `module.oci`): its pull credentials and signature key read from the host's own namespace,
//! its tag resolved (or its pinned digest taken), its signature checked, its artifact pulled.

use k8s_openapi::api::core::v1::Secret;
use oci_client::secrets::RegistryAuth;

use super::signature::{self, PublicKey};
use super::{Error, Pulled, Puller, Result, credentials};
use crate::hotload::wasmplugin::OciModule;

/// The key of a signature Secret holding the public key PEM (the name cosign gives it).
pub const SIGNATURE_SECRET_KEY: &str = "cosign.pub";

impl OciModule {
    /// The digest this module is pinned to (the reference's own, else `digest`), if any.
    pub fn pinned(&self) -> Option<String> {
        let own = self.reference.split_once('@').map(|(_, d)| d.to_owned());
        own.or_else(|| self.digest.clone())
    }
}

/// The one way both sources get an [`OciModule`]: a [`Puller`] and the host's client, which
/// reads pull and key Secrets from `namespace` (the host's own) only.
#[derive(Clone)]
pub struct Registries {
    puller: Puller,
    client: kube::Client,
    namespace: String,
}

impl Registries {
    /// Registries reached through `puller`, pull and key Secrets read with `client` from `namespace`.
    pub fn new(puller: Puller, client: kube::Client, namespace: impl Into<String>) -> Self {
        Self { puller, client, namespace: namespace.into() }
    }

    /// The puller (its disk cache, limits and options).
    pub fn puller(&self) -> &Puller {
        &self.puller
    }

    /// The credentials of `module`'s pull secret for its registry (anonymous without one).
    pub async fn auth(&self, module: &OciModule) -> Result<RegistryAuth> {
        let Some(secret) = &module.pull_secret else { return Ok(RegistryAuth::Anonymous) };
        let registry = super::parse(&module.reference)?.resolve_registry().to_owned();
        let secret = credentials::read(&self.client, &self.namespace, secret).await?;
        Ok(credentials::auth_for(&secret, &registry)?)
    }

    /// The public key `module`'s signature must verify with: none when it names none and the
    /// host does not require one. A Secret is read from the host's own namespace only.
    pub async fn signature_key(&self, module: &OciModule) -> Result<Option<PublicKey>> {
        let Some(named) = &module.signature else {
            return if self.puller.requires_signature() { Err(signature::Error::KeyMissing.into()) } else { Ok(None) };
        };
        let name = match (&named.public_key, &named.secret) {
            (Some(pem), _) => return Ok(Some(PublicKey::from_pem(pem, "publicKey")?)),
            (None, Some(secret)) => secret,
            (None, None) => {
                let message = "names neither publicKey nor secret".to_owned();
                return Err(signature::Error::KeyInvalid { what: "module.oci.signature".into(), message }.into());
            }
        };
        let what = format!("Secret {}/{name}", self.namespace);
        let api: kube::Api<Secret> = kube::Api::namespaced(self.client.clone(), &self.namespace);
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
    pub async fn verify(&self, module: &OciModule, digest: &str, auth: &RegistryAuth) -> Result<()> {
        match self.signature_key(module).await? {
            Some(key) => self.puller.verify(&module.reference, digest, auth, &key).await,
            None => Ok(()),
        }
    }

    /// The manifest digest `module` names now (no request for a pinned one). A reference with a
    /// digest and a `digest` that differs is refused.
    pub async fn resolve(&self, module: &OciModule, auth: &RegistryAuth) -> Result<String> {
        let own = module.reference.split_once('@').map(|(_, d)| d);
        if let (Some(own), Some(pinned)) = (own, &module.digest)
            && own != pinned
        {
            return Err(Error::DigestMismatch {
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

    /// The component of `module` at `digest`, its signature checked first (from the disk cache
    /// when it holds both).
    pub async fn pull(&self, module: &OciModule, digest: &str, auth: &RegistryAuth) -> Result<Pulled> {
        self.verify(module, digest, auth).await?;
        self.puller.pull(&module.reference, digest, auth).await
    }

    /// Resolves, verifies and pulls `module` now.
    pub async fn fetch(&self, module: &OciModule) -> Result<Pulled> {
        let auth = self.auth(module).await?;
        let digest = self.resolve(module, &auth).await?;
        self.pull(module, &digest, &auth).await
    }
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
