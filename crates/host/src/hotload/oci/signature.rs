//! Cosign keyed signatures of wasm artifacts, checked offline against a public key.
//!
//! The layout is cosign's: the signatures of manifest `sha256:<hex>` are the layers of the
//! manifest tagged `sha256-<hex>.sig` in the same repository, each a simple-signing JSON payload
//! naming the digest, with its base64 ECDSA P-256 / SHA-256 DER signature in the
//! `dev.cosignproject.cosign/signature` annotation. A key is the whole trust: no transparency
//! log (Rekor) or certificate authority (Fulcio) is asked, so verification works offline.
//!
//! The crypto is RustCrypto's `p256`; the layout (payload, tag, annotation) is written here,
//! because the one crate that has it, sigstore-rs, costs 49 new crates and aws-lc-sys's C build
//! (98 s cold on 2 cores) for its crypto module alone, ~98 crates with its `cosign` feature
//! (OIDC, Rekor, TUF clients), against 22 pure-Rust crates and 15 s for `p256`.

use base64::Engine as _;
use oci_client::Reference;
use oci_client::manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{DerSignature, SigningKey as EcdsaSigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, EncodePrivateKey as _, EncodePublicKey as _};
use serde::{Deserialize, Serialize};

use super::push::Artifact;
use super::{
    Error as OciError, MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES, Result as OciResult, parse, pull_layer, retry,
};

/// The annotation of a signature layer holding its base64 signature (cosign's).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The media type of a signature layer: cosign's simple-signing payload.
pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The config media type of the signature manifest (an OCI image config, as cosign writes).
pub const SIGNATURE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// An artifact of this layout. Here, not in `push`, so that pushing knows nothing of signatures.
impl Artifact {
    /// A cosign signature artifact: the simple-signing `payload` as its one layer, `signature`
    /// (base64) in the layer's annotation, and an image config naming the layer, as cosign writes.
    pub fn signature(payload: Vec<u8>, signature: String) -> Self {
        let config = serde_json::json!({
            "architecture": "", "os": "", "config": {},
            "rootfs": {"type": "layers", "diff_ids": [super::push::digest(&payload)]},
        });
        Self {
            config: serde_json::to_vec(&config).expect("JSON serializes"),
            config_media_type: SIGNATURE_CONFIG_MEDIA_TYPE.to_owned(),
            layer: payload,
            layer_media_type: PAYLOAD_MEDIA_TYPE.to_owned(),
            layer_annotations: [(SIGNATURE_ANNOTATION.to_owned(), signature)].into(),
        }
    }
}

/// The payload's `critical.type`.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// Largest payload read: cosign's are ~250 bytes plus the signer's annotations. 64 KiB (ours).
pub const MAX_PAYLOAD_BYTES: u64 = 64 << 10;
/// Signature layers read from one `.sig` manifest (each is one registry request). 16 (ours).
pub const MAX_SIGNATURES: usize = 16;

/// Why a module's signature is not accepted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The host requires a signature (`--oci-require-signature`) and the module names no key.
    #[error("the host requires signed OCI modules and spec.module.oci.signature names no key")]
    KeyMissing,
    /// The key is not a P-256 public key in PEM, or its Secret cannot be read.
    #[error("signature key {what}: {message}")]
    KeyInvalid {
        /// Where the key came from.
        what: String,
        /// What is wrong.
        message: String,
    },
    /// No signature for the digest (no `.sig` tag, or no signature layer in it).
    #[error("{reference} is not signed: no signature at {tag}")]
    Missing {
        /// The module's reference.
        reference: String,
        /// The signature tag looked at.
        tag: String,
    },
    /// No signature verifies with the key (signed by another key, or altered).
    #[error("{reference}: no signature at {tag} verifies with the key")]
    Invalid {
        /// The module's reference.
        reference: String,
        /// The signature tag.
        tag: String,
    },
    /// A signature by the key names another manifest digest (a signature copied to this tag).
    #[error("{reference}: the signature by the key is for {signed}, not {digest}")]
    AnotherDigest {
        /// The module's reference.
        reference: String,
        /// The digest being loaded.
        digest: String,
        /// The digest the signed payload names.
        signed: String,
    },
}

impl Error {
    /// The WasmPlugin status reason and metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::KeyMissing => "SignatureKeyMissing",
            Error::KeyInvalid { .. } => "SignatureKeyInvalid",
            Error::Missing { .. } => "SignatureMissing",
            Error::Invalid { .. } => "SignatureInvalid",
            Error::AnotherDigest { .. } => "SignatureForAnotherDigest",
        }
    }

    /// Whether waiting may fix it: a signature is pushed after its artifact (`cosign sign` runs
    /// after the push), and a key Secret may be made or fixed later.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Missing { .. } | Error::KeyInvalid { .. })
    }
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A public key signatures are checked with (ECDSA P-256, as `cosign generate-key-pair` makes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// The key of a `-----BEGIN PUBLIC KEY-----` PEM (`cosign.pub`); `what` names it in errors.
    pub fn from_pem(pem: &str, what: &str) -> Result<Self> {
        VerifyingKey::from_public_key_pem(pem.trim()).map(Self).map_err(|e| Error::KeyInvalid {
            what: what.to_owned(),
            message: format!("not an ECDSA P-256 public key in PEM: {e}"),
        })
    }

    /// Its `PUBLIC KEY` PEM.
    pub fn to_pem(&self) -> String {
        self.0.to_public_key_pem(p256::pkcs8::LineEnding::LF).expect("a P-256 key encodes")
    }

    /// Whether `signature` (base64 of DER) is this key's over `payload`.
    fn verifies(&self, payload: &[u8], signature: &str) -> bool {
        let Ok(der) = base64::engine::general_purpose::STANDARD.decode(signature.trim()) else { return false };
        let Ok(signature) = DerSignature::try_from(der.as_slice()) else { return false };
        self.0.verify(payload, &signature).is_ok()
    }
}

/// A private key that signs pushed modules.
#[derive(Clone)]
pub struct SigningKey(EcdsaSigningKey);

impl SigningKey {
    /// A new random key (the system's RNG).
    pub fn generate() -> Self {
        use p256::elliptic_curve::Generate as _;
        Self(EcdsaSigningKey::generate())
    }

    /// The key of a `PRIVATE KEY` (PKCS#8, `openssl genpkey`, `kubewasm generate-key`) or
    /// `EC PRIVATE KEY` (SEC1, `openssl ecparam -genkey`) PEM, or of cosign's encrypted
    /// `cosign.key` opened with `password` (cosign's `COSIGN_PASSWORD`).
    pub fn from_pem(pem: &str, password: Option<&str>) -> Result<Self> {
        let invalid = |message: String| Error::KeyInvalid { what: "--sign-key".into(), message };
        if super::cosign_key::is_cosign_key(pem) {
            let password = password.ok_or_else(|| invalid("a cosign key: set COSIGN_PASSWORD".into()))?;
            let der = super::cosign_key::decrypt(pem, password).map_err(|e| invalid(e.to_string()))?;
            let key = EcdsaSigningKey::from_pkcs8_der(&der);
            return key.map(Self).map_err(|e| invalid(format!("not an ECDSA P-256 key: {e}")));
        }
        let pem = pem.trim();
        EcdsaSigningKey::from_pkcs8_pem(pem)
            .or_else(|_| p256::SecretKey::from_sec1_pem(pem).map(EcdsaSigningKey::from))
            .map(Self)
            .map_err(|e| invalid(format!("not an ECDSA P-256 private key in PEM: {e}")))
    }

    /// Its PKCS#8 `PRIVATE KEY` PEM.
    pub fn to_pem(&self) -> String {
        self.0.to_pkcs8_pem(p256::pkcs8::LineEnding::LF).expect("a P-256 key encodes").to_string()
    }

    /// Its public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(*self.0.verifying_key())
    }

    /// The base64 DER signature of `payload` (deterministic, RFC 6979).
    pub fn sign(&self, payload: &[u8]) -> String {
        let signature: DerSignature = self.0.sign(payload);
        base64::engine::general_purpose::STANDARD.encode(signature.as_bytes())
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

/// One signature layer: the payload and its base64 signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signed {
    /// The simple-signing payload's bytes.
    pub payload: Vec<u8>,
    /// The `dev.cosignproject.cosign/signature` annotation.
    pub signature: String,
}

/// The tag holding the signatures of manifest `digest` (`sha256-<hex>.sig`), if it is sha256.
pub fn tag(digest: &str) -> Option<String> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("sha256-{hex}.sig"))
}

/// Cosign's simple-signing payload for manifest `digest` of `repository` (`registry/repo`).
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
    let payload = serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    });
    serde_json::to_vec(&payload).expect("JSON serializes")
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: Image,
    #[serde(rename = "type")]
    type_: String,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

/// The manifest digest a cosign payload names.
fn signed_digest(payload: &[u8]) -> Option<String> {
    let payload: Payload = serde_json::from_slice(payload).ok()?;
    (payload.critical.type_ == PAYLOAD_TYPE).then_some(payload.critical.image.digest)
}

/// Accepts manifest `digest` of `reference` if one of `signatures` (read from `tag`) is by
/// `key` and names `digest`. The payload's `docker-reference` is not compared, as cosign does
/// not by default: a signed artifact copied to another registry stays signed.
pub fn verify(key: &PublicKey, reference: &str, digest: &str, tag: &str, signatures: &[Signed]) -> Result<()> {
    let (reference, tag) = (reference.to_owned(), tag.to_owned());
    if signatures.is_empty() {
        return Err(Error::Missing { reference, tag });
    }
    let mut another = None;
    for signed in signatures.iter().filter(|s| key.verifies(&s.payload, &s.signature)) {
        match signed_digest(&signed.payload) {
            Some(named) if named == digest => return Ok(()),
            Some(named) => another = Some(named),
            None => {}
        }
    }
    Err(match another {
        Some(signed) => Error::AnotherDigest { reference, digest: digest.to_owned(), signed },
        None => Error::Invalid { reference, tag },
    })
}

impl super::Puller {
    /// Whether the host requires a signature for every OCI module (`--oci-require-signature`).
    pub fn requires_signature(&self) -> bool {
        self.options.require_signature
    }

    /// Checks that manifest `digest` of `reference` is signed by `key`: with the signatures kept
    /// on disk for it when one verifies (offline, as after a restart), else with those in the
    /// registry, which are kept when one verifies.
    pub async fn verify(&self, reference: &str, digest: &str, auth: &RegistryAuth, key: &PublicKey) -> OciResult<()> {
        let tag = tag(digest).ok_or_else(|| OciError::Reference {
            reference: reference.to_owned(),
            message: format!("`{digest}` is not a sha256 digest"),
        })?;
        if let Some(cache) = &self.cache
            && let Some(kept) = cache.signatures(digest).await
            && verify(key, reference, digest, &tag, &kept).is_ok()
        {
            return Ok(());
        }
        let signatures = self.signatures(reference, &tag, auth).await?;
        verify(key, reference, digest, &tag, &signatures)?;
        if let Some(cache) = &self.cache
            && let Err(e) = cache.put_signatures(digest, &signatures).await
        {
            tracing::warn!(%reference, error = %e, "cannot keep the verified signatures on disk");
        }
        Ok(())
    }

    /// The signature layers at `tag` in `reference`'s repository (none if the tag is absent).
    async fn signatures(&self, reference: &str, tag: &str, auth: &RegistryAuth) -> OciResult<Vec<Signed>> {
        let parsed = parse(reference)?;
        let at = Reference::with_tag(parsed.registry().to_owned(), parsed.repository().to_owned(), tag.to_owned());
        let _permit = self.permit(parsed.resolve_registry()).await;
        let client = self.client(parsed.resolve_registry(), auth);
        let accepted = [MANIFEST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE];
        let raw = retry(|| async {
            client.pull_manifest_raw(&at, auth, &accepted).await.map_err(|e| OciError::from_oci(reference, e))
        })
        .await;
        let raw = match raw {
            Ok((raw, _)) => raw,
            Err(OciError::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        if raw.len() > MAX_MANIFEST_BYTES {
            let (size, cap) = (raw.len() as u64, MAX_MANIFEST_BYTES as u64);
            return Err(OciError::TooLarge { reference: format!("{reference} ({tag})"), size, cap });
        }
        let manifest: OciImageManifest = serde_json::from_slice(&raw).map_err(|e| OciError::MediaType {
            reference: format!("{reference} ({tag})"),
            message: format!("the signature manifest does not parse: {e}"),
        })?;
        let mut signed = Vec::new();
        for layer in manifest.layers.iter().filter(|l| l.media_type == PAYLOAD_MEDIA_TYPE).take(MAX_SIGNATURES) {
            let Some(signature) = layer.annotations.as_ref().and_then(|a| a.get(SIGNATURE_ANNOTATION)) else {
                continue;
            };
            let payload = retry(|| pull_layer(&client, reference, &at, layer, MAX_PAYLOAD_BYTES)).await?;
            signed.push(Signed { payload: payload.to_vec(), signature: signature.clone() });
        }
        Ok(signed)
    }

    /// Signs manifest `digest` of `reference` with `key` and pushes the signature to the
    /// digest's `.sig` tag, as `cosign sign --key` does (replacing any signature there).
    pub async fn push_signature(
        &self,
        reference: &str,
        digest: &str,
        key: &SigningKey,
        auth: &RegistryAuth,
    ) -> OciResult<()> {
        let parsed = parse(reference)?;
        let tag = tag(digest).ok_or_else(|| OciError::Reference {
            reference: reference.to_owned(),
            message: format!("`{digest}` is not a sha256 digest"),
        })?;
        let repository = format!("{}/{}", parsed.registry(), parsed.repository());
        let payload = payload(&repository, digest);
        let signature = key.sign(&payload);
        self.push(&format!("{repository}:{tag}"), &Artifact::signature(payload, signature), auth).await?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const DIGEST: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const OTHER: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn signed(key: &SigningKey, digest: &str) -> Signed {
        let payload = payload("r.example/p", digest);
        Signed { signature: key.sign(&payload), payload }
    }

    fn reason(key: &SigningKey, signatures: &[Signed]) -> &'static str {
        match verify(&key.public_key(), "r.example/p:v1", DIGEST, "t", signatures) {
            Ok(()) => "Ok",
            Err(e) => e.reason(),
        }
    }

    #[test]
    fn a_signature_by_the_key_for_the_digest_is_accepted_and_every_other_is_refused_with_its_reason() {
        let (key, other_key) = (SigningKey::generate(), SigningKey::generate());
        assert_eq!(reason(&key, &[signed(&key, DIGEST)]), "Ok");
        assert_eq!(reason(&key, &[]), "SignatureMissing");
        assert_eq!(reason(&key, &[signed(&other_key, DIGEST)]), "SignatureInvalid");
        assert_eq!(reason(&key, &[signed(&key, OTHER)]), "SignatureForAnotherDigest");
        assert_eq!(reason(&key, &[signed(&other_key, DIGEST), signed(&key, DIGEST)]), "Ok", "any one suffices");
        let mut altered = signed(&key, DIGEST);
        altered.payload[0] = b' ';
        assert_eq!(reason(&key, &[altered]), "SignatureInvalid");
        let garbage = Signed { payload: b"{}".to_vec(), signature: "not base64!".into() };
        assert_eq!(reason(&key, &[garbage]), "SignatureInvalid");
    }

    #[test]
    fn keys_round_trip_through_pem_and_a_cosign_key_without_password_or_a_foreign_key_is_refused() {
        let key = SigningKey::generate();
        let again = SigningKey::from_pem(&key.to_pem(), None).unwrap();
        assert_eq!(again.public_key(), key.public_key());
        let public = PublicKey::from_pem(&key.public_key().to_pem(), "inline").unwrap();
        assert_eq!(public, key.public_key());
        let encrypted =
            "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJ9\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----";
        assert_eq!(SigningKey::from_pem(encrypted, None).unwrap_err().reason(), "SignatureKeyInvalid");
        assert_eq!(PublicKey::from_pem("hello", "inline").unwrap_err().reason(), "SignatureKeyInvalid");
    }

    /// The signature layer `cosign sign --key cosign.key --tlog-upload=false` (cosign v2.6.5,
    /// built from the Go module proxy: ~17 min, too heavy for CI) pushed for a module that
    /// `kubewasm push` put in a local distribution registry; its key from
    /// `cosign generate-key-pair`. Its manifest at the `.sig` tag had one layer of
    /// [`PAYLOAD_MEDIA_TYPE`] with the signature in [`SIGNATURE_ANNOTATION`].
    pub(crate) const COSIGN_PUB: &str = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEM3nV/QTbpAlNaqgSrNvkJbFFEJsH\nPMx0UcfeLHVnlGmvthMGpJqCvE4rSuTfsL96b78DJnWcRbJ3yKPimNJicw==\n-----END PUBLIC KEY-----";
    const COSIGN_REPOSITORY: &str = "127.0.0.1:15099/t/st";
    const COSIGN_DIGEST: &str = "sha256:07730e9a1b42eff22053a0dfeae938a413d4f28b11deb1b66c21236fbbc5e98a";
    const COSIGN_PAYLOAD: &str = r#"{"critical":{"identity":{"docker-reference":"127.0.0.1:15099/t/st"},"image":{"docker-manifest-digest":"sha256:07730e9a1b42eff22053a0dfeae938a413d4f28b11deb1b66c21236fbbc5e98a"},"type":"cosign container image signature"},"optional":null}"#;
    const COSIGN_SIGNATURE: &str =
        "MEUCIQD0sg38kTQTXfwO94sxC7/9iXLpm74EfHK/nJ1sIdP6ogIgbohw/ntv1t9QFhd5Zp3LSgJfbY4MaIEFeLn2cI7Gr2g=";

    #[test]
    fn a_cosign_made_signature_verifies_and_our_payload_is_cosigns_byte_for_byte() {
        assert_eq!(payload(COSIGN_REPOSITORY, COSIGN_DIGEST), COSIGN_PAYLOAD.as_bytes());
        let key = PublicKey::from_pem(COSIGN_PUB, "cosign.pub").unwrap();
        let signed = Signed { payload: COSIGN_PAYLOAD.as_bytes().to_vec(), signature: COSIGN_SIGNATURE.into() };
        let tag = tag(COSIGN_DIGEST).unwrap();
        verify(&key, "127.0.0.1:15099/t/st:v1", COSIGN_DIGEST, &tag, std::slice::from_ref(&signed)).unwrap();
        let err = verify(&SigningKey::generate().public_key(), "r", COSIGN_DIGEST, &tag, &[signed]).unwrap_err();
        assert_eq!(err.reason(), "SignatureInvalid");
    }

    #[tokio::test(start_paused = true)]
    async fn kept_signatures_verify_offline_and_only_with_the_key_they_verified_with() {
        let dir = tempfile::tempdir().unwrap();
        let options = super::super::Options { cache_dir: Some(dir.path().to_owned()), ..Default::default() };
        let puller = super::super::Puller::new(&options);
        let (key, other_key) = (SigningKey::generate(), SigningKey::generate());
        super::super::BlobCache::new(dir.path().to_owned())
            .put_signatures(DIGEST, &[signed(&key, DIGEST)])
            .await
            .unwrap();
        // Nothing listens on port 1: any registry request fails.
        let reference = "127.0.0.1:1/team/p:v1";
        puller.verify(reference, DIGEST, &RegistryAuth::Anonymous, &key.public_key()).await.unwrap();
        let err = puller.verify(reference, DIGEST, &RegistryAuth::Anonymous, &other_key.public_key()).await;
        assert_eq!(err.unwrap_err().reason(), "RegistryUnreachable", "another key asks the registry");
        let err = puller.verify(reference, OTHER, &RegistryAuth::Anonymous, &key.public_key()).await;
        assert_eq!(err.unwrap_err().reason(), "RegistryUnreachable", "another digest's are not kept");
    }

    #[test]
    fn the_signature_tag_is_the_digest_with_a_dash_and_sig() {
        assert_eq!(tag(DIGEST).unwrap(), format!("sha256-{}.sig", "a".repeat(64)));
        assert_eq!(tag("sha256:../x"), None);
    }
}
