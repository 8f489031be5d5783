//! Pulled wasm artifacts on disk by digest: a restarted host loads them without pulling again.
//!
//! `<dir>/manifests/sha256-<hex>` holds a manifest, `<dir>/blobs/sha256-<hex>` a layer and
//! `<dir>/signatures/sha256-<hex>` the cosign signatures that verified for it; the first two are
//! written to a temporary file and renamed, and checked against their digest when read, so a
//! torn or tampered file is a cache miss, never a wrong module.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oci_client::manifest::OciImageManifest;

/// The on-disk cache of pulled manifests and layers.
#[derive(Clone, Debug)]
pub struct BlobCache {
    dir: PathBuf,
}

impl BlobCache {
    /// A cache in `dir` (created when first written).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The component of manifest `digest` and its layer's digest, if both the manifest and its
    /// layer are here intact.
    pub async fn get(&self, digest: &str) -> Option<(Arc<[u8]>, String)> {
        let raw = read_checked(&self.path("manifests", digest)?, digest).await?;
        let manifest: OciImageManifest = serde_json::from_slice(&raw).ok()?;
        let layer = manifest.layers.first()?;
        let wasm = read_checked(&self.path("blobs", &layer.digest)?, &layer.digest).await?;
        Some((Arc::from(wasm), layer.digest.clone()))
    }

    /// Keeps the raw manifest `manifest` (of digest `digest`, checked by the caller) and its
    /// layer `wasm` (of digest `layer_digest`); the layer first, so a manifest on disk always
    /// has its layer beside it.
    pub async fn put(&self, digest: &str, manifest: &[u8], layer_digest: &str, wasm: &[u8]) -> std::io::Result<()> {
        let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a sha256 digest");
        write_atomically(&self.path("blobs", layer_digest).ok_or_else(invalid)?, wasm).await?;
        write_atomically(&self.path("manifests", digest).ok_or_else(invalid)?, manifest).await
    }

    /// The signatures kept for manifest `digest` (checked against a key by the caller, so a
    /// tampered file is at worst signatures that do not verify).
    pub async fn signatures(&self, digest: &str) -> Option<Vec<super::signature::Signed>> {
        let bytes = tokio::fs::read(self.path("signatures", digest)?).await.ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Keeps `signatures` of manifest `digest` (after one verified).
    pub async fn put_signatures(&self, digest: &str, signatures: &[super::signature::Signed]) -> std::io::Result<()> {
        let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a sha256 digest");
        let json = serde_json::to_vec(signatures).map_err(std::io::Error::other)?;
        write_atomically(&self.path("signatures", digest).ok_or_else(invalid)?, &json).await
    }

    /// `<dir>/<kind>/sha256-<hex>` for a well-formed sha256 digest.
    fn path(&self, kind: &str, digest: &str) -> Option<PathBuf> {
        let hex = digest.strip_prefix("sha256:")?;
        let well_formed = hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
        well_formed.then(|| self.dir.join(kind).join(format!("sha256-{hex}")))
    }
}

/// The file's bytes if their sha256 is `digest`.
async fn read_checked(path: &Path, digest: &str) -> Option<Vec<u8>> {
    let bytes = tokio::fs::read(path).await.ok()?;
    let got = format!("sha256:{}", crate::plugin::sha256_hex(&bytes));
    if got == digest {
        Some(bytes)
    } else {
        tracing::warn!(path = %path.display(), "cached blob does not match its digest; pulling again");
        None
    }
}

async fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("cache paths have a parent");
    tokio::fs::create_dir_all(dir).await?;
    let tmp = dir.join(format!(".{}.tmp", std::process::id()));
    tokio::fs::write(&tmp, bytes).await?;
    tokio::fs::rename(&tmp, path).await
}

#[cfg(test)]
mod tests {
    use oci_client::manifest::OciDescriptor;

    use super::*;

    fn digest(bytes: &[u8]) -> String {
        format!("sha256:{}", crate::plugin::sha256_hex(bytes))
    }

    fn manifest_of(wasm: &[u8]) -> Vec<u8> {
        let layer = OciDescriptor { digest: digest(wasm), size: wasm.len() as i64, ..Default::default() };
        serde_json::to_vec(&OciImageManifest { layers: vec![layer], ..Default::default() }).unwrap()
    }

    #[tokio::test]
    async fn a_kept_module_is_found_by_its_manifest_digest_and_a_tampered_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::new(dir.path().to_owned());
        let wasm = b"\0asm component bytes";
        let manifest = manifest_of(wasm);
        let manifest_digest = digest(&manifest);
        assert!(cache.get(&manifest_digest).await.is_none(), "empty at first");
        cache.put(&manifest_digest, &manifest, &digest(wasm), wasm).await.unwrap();
        let (got, layer_digest) = cache.get(&manifest_digest).await.expect("kept");
        assert_eq!((&got[..], layer_digest), (&wasm[..], digest(wasm)));
        let blob = cache.path("blobs", &digest(wasm)).unwrap();
        std::fs::write(&blob, b"tampered").unwrap();
        assert!(cache.get(&manifest_digest).await.is_none(), "a blob that fails its digest is a miss");
    }

    #[test]
    fn only_well_formed_sha256_digests_name_files() {
        let cache = BlobCache::new(PathBuf::from("c"));
        assert!(cache.path("blobs", &format!("sha256:{}", "a".repeat(64))).is_some());
        assert!(cache.path("blobs", "sha256:../../etc/passwd").is_none());
        assert!(cache.path("blobs", &format!("sha512:{}", "a".repeat(128))).is_none());
    }
}
