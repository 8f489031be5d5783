//! A plugin's component as a source hands it over: its bytes and their sha256, hashed once.

use std::sync::Arc;

/// A component's bytes and their sha256 (lowercase hex).
///
/// The source that reads the bytes hashes them, or already knows their digest: the directory
/// source fingerprints each file it reads, a registry's layer digest was checked as it was
/// pulled, a URL's or ConfigMap's pin was checked against the bytes. [`LoadedPlugins`] tells
/// versions apart by this hash and the runtime keys its compile cache by it, so a 10–20 MB
/// interpreter component is hashed once per read, not once per layer it passes.
///
/// [`LoadedPlugins`]: super::LoadedPlugins
#[derive(Clone)]
pub struct Module {
    bytes: Arc<[u8]>,
    sha256: String,
}

impl Module {
    /// `bytes`, hashed off the async workers.
    pub async fn hash(bytes: impl Into<Arc<[u8]>>) -> Self {
        let bytes = bytes.into();
        let hashed = bytes.clone();
        let sha256 = tokio::task::spawn_blocking(move || crate::plugin::sha256_hex(&hashed))
            .await
            .expect("hashing does not panic");
        Self { bytes, sha256 }
    }

    /// `bytes`, hashed on this thread (for callers already off the async workers).
    pub fn hash_blocking(bytes: impl Into<Arc<[u8]>>) -> Self {
        let bytes = bytes.into();
        let sha256 = crate::plugin::sha256_hex(&bytes);
        Self { bytes, sha256 }
    }

    /// `bytes` with the sha256 the caller computed or checked for exactly these bytes (hex, any
    /// case; kept lowercase).
    pub fn digested(bytes: impl Into<Arc<[u8]>>, sha256: &str) -> Self {
        Self { bytes: bytes.into(), sha256: sha256.to_ascii_lowercase() }
    }

    /// The component's bytes.
    pub fn bytes(&self) -> &Arc<[u8]> {
        &self.bytes
    }

    /// Their sha256, lowercase hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module").field("bytes", &self.bytes.len()).field("sha256", &self.sha256).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_constructor_gives_the_same_lowercase_hash_for_the_same_bytes() {
        let bytes: &[u8] = b"\0asm component";
        let hashed = Module::hash(bytes.to_vec()).await;
        assert_eq!(hashed.sha256(), crate::plugin::sha256_hex(bytes));
        assert_eq!(Module::hash_blocking(bytes.to_vec()).sha256(), hashed.sha256());
        let upper = hashed.sha256().to_ascii_uppercase();
        assert_eq!(Module::digested(bytes.to_vec(), &upper).sha256(), hashed.sha256());
        assert_eq!(&hashed.bytes()[..], bytes);
    }
}
