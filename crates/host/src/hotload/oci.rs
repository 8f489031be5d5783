//! WasmPlugin modules from OCI registries: a tag resolved to a digest, the wasm artifact
//! (`application/wasm` layer) pulled by digest within bounds, and kept on disk by digest.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use tokio::sync::Semaphore;

use super::module::Module;

mod cache;
mod cosign_key;
pub mod credentials;
pub mod push;
mod registries;
pub mod signature;

pub use cache::BlobCache;
pub use registries::{Registries, SIGNATURE_SECRET_KEY};

/// The manifest media type of a wasm artifact (the OCI image manifest).
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config media type of a wasm artifact (the CNCF TAG Runtime wasm OCI artifact layout).
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the one layer: the component's bytes.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The config media type of a plugin given as source (kubewasm's own: it is no component).
pub const SOURCE_CONFIG_MEDIA_TYPE: &str = "application/vnd.kubewasm.plugin.source.config.v1+json";
/// The media type of a source artifact's one layer: the plugin's files as a source bundle
/// (`kubewasm_runtime::source`), which its config's `engine` runs.
pub const SOURCE_LAYER_MEDIA_TYPE: &str = "application/vnd.kubewasm.plugin.source.v1";
/// Largest layer pulled: the URL source's cap (Python and JS components are tens of MiB).
pub const MAX_LAYER_BYTES: u64 = super::fetch::MAX_MODULE_BYTES as u64;
/// Largest manifest read: the OCI distribution spec's 4 MiB, which registries enforce on push.
const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// One registry request (connect + answer) may take this long; a whole pull is bounded by the
/// caller's timeout. 30 s, containerd's default dial-and-response budget order of magnitude.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Connecting to a registry. 10 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts at a request that failed transiently (unreachable, timeout, 5xx); the waits between
/// them double from [`RETRY_BASE`]. 3 attempts, 0.5 s then 1 s (our choice: a WasmPlugin's own
/// queue backoff takes over after that).
const ATTEMPTS: u32 = 3;
const RETRY_BASE: Duration = Duration::from_millis(500);
/// Pulls from one registry at once, across all WasmPlugins (a host start with many plugins
/// does not open dozens of connections to one registry). 2.
pub const PER_REGISTRY_PULLS: usize = 2;

/// Why a module could not be had from a registry.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference does not parse.
    #[error("invalid OCI reference `{reference}`: {message}")]
    Reference {
        /// The reference.
        reference: String,
        /// What is wrong.
        message: String,
    },
    /// Connection or TLS failure, or the registry failed (5xx).
    #[error("registry of {reference} unreachable: {message}")]
    Unreachable {
        /// The reference.
        reference: String,
        /// What failed.
        message: String,
    },
    /// No answer in time.
    #[error("pulling {0}: timed out")]
    Timeout(String),
    /// The registry refused the credentials (or their absence): HTTP 401 or 403.
    #[error("the registry refused to serve {reference} with the credentials given: {message}")]
    Unauthorized {
        /// The reference.
        reference: String,
        /// The registry's answer.
        message: String,
    },
    /// No such repository, tag or digest.
    #[error("{reference} not found in the registry: {message}")]
    NotFound {
        /// The reference.
        reference: String,
        /// The registry's answer.
        message: String,
    },
    /// Not a wasm artifact (another manifest, config or layer media type, or not one layer).
    #[error("{reference} is not a wasm component artifact: {message}")]
    MediaType {
        /// The reference.
        reference: String,
        /// What is not as expected.
        message: String,
    },
    /// The bytes are not the ones their digest names (or the pinned digest).
    #[error("{reference}: expected digest {expected}, got {got}")]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what came.
        got: String,
    },
    /// The layer is larger than [`MAX_LAYER_BYTES`].
    #[error("{reference}: layer of {size} bytes is over the cap of {cap} bytes")]
    TooLarge {
        /// The reference.
        reference: String,
        /// Its size (declared, or read so far).
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// Another registry answer this host does not act on.
    #[error("registry error for {reference}: {message}")]
    Registry {
        /// The reference.
        reference: String,
        /// The error.
        message: String,
    },
    /// The pull secret could not be read or used.
    #[error(transparent)]
    Credentials(#[from] credentials::Error),
    /// The module's signature is missing or not accepted, or its key is.
    #[error(transparent)]
    Signature(#[from] signature::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The WasmPlugin status reason and metric label of this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Reference { .. } => "InvalidReference",
            Error::Unreachable { .. } | Error::Timeout(_) => "RegistryUnreachable",
            Error::Unauthorized { .. } => "RegistryUnauthorized",
            Error::NotFound { .. } => "ModuleNotFound",
            Error::MediaType { .. } => "WrongMediaType",
            Error::DigestMismatch { .. } => "DigestMismatch",
            Error::TooLarge { .. } => "ModuleTooLarge",
            Error::Registry { .. } => "RegistryError",
            Error::Credentials(_) => "PullSecretInvalid",
            Error::Signature(e) => e.reason(),
        }
    }

    /// Whether waiting may fix it (the registry comes back, the tag is pushed, the secret made).
    pub fn is_transient(&self) -> bool {
        if let Error::Signature(e) = self {
            return e.is_transient();
        }
        matches!(
            self,
            Error::Unreachable { .. }
                | Error::Timeout(_)
                | Error::NotFound { .. }
                | Error::Unauthorized { .. }
                | Error::Registry { .. }
                | Error::Credentials(_)
        )
    }

    fn from_oci(reference: &str, err: OciDistributionError) -> Self {
        let reference = reference.to_owned();
        let message = err.to_string();
        match err {
            OciDistributionError::UnauthorizedError { .. } | OciDistributionError::AuthenticationFailure(_) => {
                Error::Unauthorized { reference, message }
            }
            OciDistributionError::ImageManifestNotFoundError(_) => Error::NotFound { reference, message },
            OciDistributionError::RegistryError { ref envelope, .. } => {
                let codes: Vec<_> = envelope.errors.iter().map(|e| &e.code).collect();
                if codes.iter().any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied)) {
                    Error::Unauthorized { reference, message }
                } else if codes.iter().any(|c| {
                    matches!(c, OciErrorCode::ManifestUnknown | OciErrorCode::BlobUnknown | OciErrorCode::NameUnknown)
                }) {
                    Error::NotFound { reference, message }
                } else {
                    Error::Registry { reference, message }
                }
            }
            OciDistributionError::ServerError { code: 401 | 403, .. } => Error::Unauthorized { reference, message },
            OciDistributionError::ServerError { code: 404, .. } => Error::NotFound { reference, message },
            OciDistributionError::ServerError { code, .. } if code >= 500 => Error::Unreachable { reference, message },
            OciDistributionError::RequestError(e) if e.is_timeout() => Error::Timeout(reference),
            OciDistributionError::RequestError(e) => Error::Unreachable { reference, message: format!("{e:#?}") },
            OciDistributionError::UnsupportedMediaTypeError(_)
            | OciDistributionError::IncompatibleLayerMediaTypeError(_)
            | OciDistributionError::ImageIndexParsingNoPlatformResolverError => Error::MediaType { reference, message },
            _ => Error::Registry { reference, message },
        }
    }

    fn retryable(&self) -> bool {
        matches!(self, Error::Unreachable { .. } | Error::Timeout(_))
    }
}

/// What the host's registry client is set up with.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Where pulled manifests and layers are kept by digest; none: pulled again after a restart.
    pub cache_dir: Option<PathBuf>,
    /// PEM CA certificates trusted beside the system's (private registries).
    pub ca_pem: Option<Vec<u8>>,
    /// Registries spoken to over plain HTTP (`host:port`), for a registry on localhost.
    pub insecure_registries: Vec<String>,
    /// Largest layer pulled; unset: [`MAX_LAYER_BYTES`].
    pub max_layer_bytes: Option<u64>,
    /// Whether every module must be signed by the key its WasmPlugin names.
    pub require_signature: bool,
}

/// A module pulled: the component and the manifest digest it came from.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The manifest's digest (`sha256:…`).
    pub digest: String,
    /// The component, with its layer's digest as its hash.
    pub module: Module,
    /// Whether it came from the disk cache rather than the registry.
    pub cached: bool,
}

/// The host's OCI clients, the per-registry limit and the blob cache.
///
/// oci-client keeps the first credentials it is given per registry, so a client shared by all
/// plugins would pull one plugin's module with another's credentials: there is one client per
/// registry and credentials, made on first use.
#[derive(Clone)]
pub struct Puller {
    options: Arc<Options>,
    clients: Arc<parking_lot::Mutex<HashMap<String, Arc<Client>>>>,
    cache: Option<BlobCache>,
    limits: Arc<parking_lot::Mutex<HashMap<String, Arc<Semaphore>>>>,
}

impl Puller {
    /// A puller with `options`.
    pub fn new(options: &Options) -> Self {
        // reqwest's rustls has no provider of its own here; kube's TLS already uses ring's.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cache = options.cache_dir.clone().map(BlobCache::new);
        Self { options: Arc::new(options.clone()), clients: Default::default(), cache, limits: Default::default() }
    }

    /// The client for `registry` with `auth`.
    fn client(&self, registry: &str, auth: &RegistryAuth) -> Arc<Client> {
        let who = match auth {
            RegistryAuth::Anonymous => String::new(),
            RegistryAuth::Basic(user, password) => crate::plugin::sha256_hex(format!("{user}:{password}").as_bytes()),
            RegistryAuth::Bearer(token) => crate::plugin::sha256_hex(token.as_bytes()),
        };
        let key = format!("{registry} {who}");
        self.clients.lock().entry(key).or_insert_with(|| Arc::new(Client::new(self.client_config()))).clone()
    }

    fn client_config(&self) -> ClientConfig {
        let options = &self.options;
        let extra_root_certificates = options
            .ca_pem
            .iter()
            .map(|pem| Certificate { encoding: CertificateEncoding::Pem, data: pem.clone() })
            .collect();
        let protocol = if options.insecure_registries.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(options.insecure_registries.clone())
        };
        ClientConfig {
            protocol,
            extra_root_certificates,
            read_timeout: Some(REQUEST_TIMEOUT),
            connect_timeout: Some(CONNECT_TIMEOUT),
            user_agent: concat!("kubewasm/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        }
    }

    fn max_layer_bytes(&self) -> u64 {
        self.options.max_layer_bytes.unwrap_or(MAX_LAYER_BYTES)
    }

    /// The manifest digest `reference` names now: its own digest, else its tag's, asked of the
    /// registry.
    pub async fn resolve(&self, reference: &str, auth: &RegistryAuth) -> Result<String> {
        let parsed = parse(reference)?;
        if let Some(digest) = parsed.digest() {
            return Ok(digest.to_owned());
        }
        let _permit = self.permit(parsed.resolve_registry()).await;
        let client = self.client(parsed.resolve_registry(), auth);
        retry(|| async { client.fetch_manifest_digest(&parsed, auth).await.map_err(|e| Error::from_oci(reference, e)) })
            .await
    }

    /// The component of `reference` at manifest `digest`: from the cache when it holds it,
    /// else pulled (manifest, then its one `application/wasm` layer) and cached.
    pub async fn pull(&self, reference: &str, digest: &str, auth: &RegistryAuth) -> Result<Pulled> {
        if let Some(module) = self.cached(digest).await {
            return Ok(Pulled { digest: digest.to_owned(), module, cached: true });
        }
        let parsed = parse(reference)?.clone_with_digest(digest.to_owned());
        let _permit = self.permit(parsed.resolve_registry()).await;
        let client = self.client(parsed.resolve_registry(), auth);
        let (raw, manifest) = retry(|| manifest(&client, reference, &parsed, digest, auth)).await?;
        let layer = wasm_layer(reference, &manifest, self.max_layer_bytes())?;
        let wasm = retry(|| pull_layer(&client, reference, &parsed, layer, self.max_layer_bytes())).await?;
        if let Some(cache) = &self.cache {
            // A cache that cannot be written costs a pull at the next start, nothing more.
            if let Err(e) = cache.put(digest, &raw, &layer.digest, &wasm).await {
                tracing::warn!(%reference, error = %e, "cannot keep the pulled module on disk");
            }
        }
        Ok(Pulled { digest: digest.to_owned(), module: layer_module(wasm, &layer.digest), cached: false })
    }

    /// The component cached for manifest `digest`, if any (checked against its digests).
    pub async fn cached(&self, digest: &str) -> Option<Module> {
        let (wasm, layer_digest) = self.cache.as_ref()?.get(digest).await?;
        Some(layer_module(wasm, &layer_digest))
    }

    async fn permit(&self, registry: &str) -> tokio::sync::OwnedSemaphorePermit {
        let semaphore = self
            .limits
            .lock()
            .entry(registry.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(PER_REGISTRY_PULLS)))
            .clone();
        semaphore.acquire_owned().await.expect("never closed")
    }
}

async fn manifest(
    client: &Client,
    reference: &str,
    parsed: &Reference,
    digest: &str,
    auth: &RegistryAuth,
) -> Result<(bytes::Bytes, OciImageManifest)> {
    let accepted = [MANIFEST_MEDIA_TYPE, oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE];
    let (raw, _) =
        client.pull_manifest_raw(parsed, auth, &accepted).await.map_err(|e| Error::from_oci(reference, e))?;
    if raw.len() > MAX_MANIFEST_BYTES {
        let size = raw.len() as u64;
        return Err(Error::TooLarge { reference: reference.to_owned(), size, cap: MAX_MANIFEST_BYTES as u64 });
    }
    let got = format!("sha256:{}", crate::plugin::sha256_hex(&raw));
    if got != digest {
        return Err(Error::DigestMismatch { reference: reference.to_owned(), expected: digest.to_owned(), got });
    }
    let media = |message: String| Error::MediaType { reference: reference.to_owned(), message };
    match serde_json::from_slice::<OciManifest>(&raw) {
        Ok(OciManifest::Image(manifest)) => Ok((raw, manifest)),
        Ok(OciManifest::ImageIndex(_)) => Err(media("an image index, not one artifact's manifest".into())),
        Err(e) => Err(media(format!("the manifest does not parse: {e}"))),
    }
}

async fn pull_layer(
    client: &Client,
    reference: &str,
    parsed: &Reference,
    layer: &OciDescriptor,
    cap: u64,
) -> Result<Arc<[u8]>> {
    let too_large = |size: u64| Error::TooLarge { reference: reference.to_owned(), size, cap };
    let mut stream = client.pull_blob_stream(parsed, layer).await.map_err(|e| Error::from_oci(reference, e))?;
    if let Some(length) = stream.content_length.filter(|l| *l > cap) {
        return Err(too_large(length));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(layer.size).unwrap_or(0).min(cap as usize));
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| Error::Unreachable { reference: reference.to_owned(), message: e.to_string() })?;
        if (bytes.len() + chunk.len()) as u64 > cap {
            return Err(too_large((bytes.len() + chunk.len()) as u64));
        }
        bytes.extend_from_slice(&chunk);
    }
    let got = format!("sha256:{}", crate::plugin::sha256_hex(&bytes));
    if got != layer.digest {
        let expected = layer.digest.clone();
        return Err(Error::DigestMismatch { reference: reference.to_owned(), expected, got });
    }
    Ok(Arc::from(bytes))
}

/// The component of a layer whose bytes were checked against `layer_digest` (`sha256:<hex>`):
/// that digest is the component's hash, so it is not hashed again.
fn layer_module(wasm: Arc<[u8]>, layer_digest: &str) -> Module {
    Module::digested(wasm, layer_digest.strip_prefix("sha256:").unwrap_or(layer_digest))
}

/// Parses `reference` (`registry/repository:tag` or `…@sha256:…`).
pub fn parse(reference: &str) -> Result<Reference> {
    reference.parse().map_err(|e: oci_client::ParseError| Error::Reference {
        reference: reference.to_owned(),
        message: e.to_string(),
    })
}

/// The one layer of a wasm artifact's manifest (`application/wasm`) or of a source artifact's
/// (the source bundle), within the size cap.
fn wasm_layer<'a>(reference: &str, manifest: &'a OciImageManifest, cap: u64) -> Result<&'a OciDescriptor> {
    let media = |message: String| Error::MediaType { reference: reference.to_owned(), message };
    let layer_type = match manifest.config.media_type.as_str() {
        CONFIG_MEDIA_TYPE => LAYER_MEDIA_TYPE,
        SOURCE_CONFIG_MEDIA_TYPE => SOURCE_LAYER_MEDIA_TYPE,
        other => {
            return Err(media(format!(
                "config media type `{other}`, not `{CONFIG_MEDIA_TYPE}` (a component) or `{SOURCE_CONFIG_MEDIA_TYPE}` (a source)"
            )));
        }
    };
    let [layer] = manifest.layers.as_slice() else {
        return Err(media(format!("{} layers, not one", manifest.layers.len())));
    };
    if layer.media_type != layer_type {
        return Err(media(format!("layer media type `{}`, not `{layer_type}`", layer.media_type)));
    }
    if u64::try_from(layer.size).unwrap_or(u64::MAX) > cap {
        let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
        return Err(Error::TooLarge { reference: reference.to_owned(), size, cap });
    }
    Ok(layer)
}

/// Runs `attempt` up to [`ATTEMPTS`] times while it fails transiently, with doubling waits.
async fn retry<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut wait = RETRY_BASE;
    for _ in 1..ATTEMPTS {
        match attempt().await {
            Err(e) if e.retryable() => {
                tracing::debug!(error = %e, ?wait, "registry request failed; retrying");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            done => return done,
        }
    }
    attempt().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(config: &str, layers: &[(&str, i64)]) -> OciImageManifest {
        let layers = layers
            .iter()
            .map(|(media_type, size)| OciDescriptor {
                media_type: (*media_type).to_owned(),
                size: *size,
                digest: "sha256:00".into(),
                ..Default::default()
            })
            .collect();
        let config = OciDescriptor { media_type: config.to_owned(), ..Default::default() };
        OciImageManifest { config, layers, ..Default::default() }
    }

    #[test]
    fn a_wasm_artifact_has_the_wasm_config_and_one_wasm_layer_within_the_cap() {
        assert!(wasm_layer("r", &manifest(CONFIG_MEDIA_TYPE, &[(LAYER_MEDIA_TYPE, 10)]), MAX_LAYER_BYTES).is_ok());
        let source = manifest(SOURCE_CONFIG_MEDIA_TYPE, &[(SOURCE_LAYER_MEDIA_TYPE, 10)]);
        assert!(wasm_layer("r", &source, MAX_LAYER_BYTES).is_ok(), "a plugin given as source");
        let mixed = manifest(SOURCE_CONFIG_MEDIA_TYPE, &[(LAYER_MEDIA_TYPE, 10)]);
        assert_eq!(wasm_layer("r", &mixed, MAX_LAYER_BYTES).unwrap_err().reason(), "WrongMediaType");
        let image = manifest("application/vnd.oci.image.config.v1+json", &[(LAYER_MEDIA_TYPE, 10)]);
        assert_eq!(wasm_layer("r", &image, MAX_LAYER_BYTES).unwrap_err().reason(), "WrongMediaType");
        let tar = manifest(CONFIG_MEDIA_TYPE, &[("application/vnd.oci.image.layer.v1.tar", 10)]);
        assert_eq!(wasm_layer("r", &tar, MAX_LAYER_BYTES).unwrap_err().reason(), "WrongMediaType");
        let two = manifest(CONFIG_MEDIA_TYPE, &[(LAYER_MEDIA_TYPE, 1), (LAYER_MEDIA_TYPE, 1)]);
        assert_eq!(wasm_layer("r", &two, MAX_LAYER_BYTES).unwrap_err().reason(), "WrongMediaType");
        let huge = manifest(CONFIG_MEDIA_TYPE, &[(LAYER_MEDIA_TYPE, MAX_LAYER_BYTES as i64 + 1)]);
        assert_eq!(wasm_layer("r", &huge, MAX_LAYER_BYTES).unwrap_err().reason(), "ModuleTooLarge");
    }

    #[test]
    fn a_reference_with_a_digest_needs_no_resolution_and_garbage_is_refused() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let parsed = parse(&format!("registry.example/team/p@{digest}")).unwrap();
        assert_eq!(parsed.digest(), Some(digest.as_str()));
        assert_eq!(parse("UPPER CASE/no").unwrap_err().reason(), "InvalidReference");
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_with_backoff_and_others_are_not() {
        let calls = std::sync::atomic::AtomicU32::new(0);
        let unreachable = retry(|| async {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err::<(), _>(Error::Timeout("r".into()))
        })
        .await;
        assert_eq!(unreachable.unwrap_err().reason(), "RegistryUnreachable");
        assert_eq!(calls.swap(0, std::sync::atomic::Ordering::SeqCst), ATTEMPTS);
        let refused = retry(|| async {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err::<(), _>(Error::Unauthorized { reference: "r".into(), message: "401".into() })
        })
        .await;
        assert_eq!(refused.unwrap_err().reason(), "RegistryUnauthorized");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1, "a 401 is not retried");
    }
}
