//! Helpers shared by the host's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

/// Where `make plugins` puts guest components.
pub fn plugin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUBEWASM_PLUGIN_DIR") {
        return dir.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("wasm32-wasip2/plugin")
}

/// A compile cache shared by the tests of this workspace, so each component compiles once.
pub fn test_compile_cache() -> PathBuf {
    plugin_dir().join("../test-compile-cache")
}

/// The bytes of a built plugin component; fails loudly, saying how to build it.
pub fn plugin_wasm(file: &str) -> Arc<[u8]> {
    let path = plugin_dir().join(file);
    match std::fs::read(&path) {
        Ok(bytes) => bytes.into(),
        Err(e) => panic!("cannot read plugin {}: {e}. Build the plugins first: `make plugins`", path.display()),
    }
}

/// Polls `check` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
