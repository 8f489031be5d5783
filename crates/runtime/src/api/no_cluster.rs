//! [`NoCluster`]: the cache and writer of a plugin loaded with no cluster behind it
//! (`kubewasm check`), where only `describe()` runs.

use async_trait::async_trait;
use kube::core::GroupVersionKind;

use super::{ApiCall, ApiReply, ApiWriter, CacheReader, CallError, Caller, Hidden};

/// An empty cache and a writer that sends nothing: every read finds nothing, every request
/// fails as `unavailable`, saying there is no cluster. For loading a plugin to see what it asks
/// for, not for running it (`kubewasm test` runs one offline with a `RecordingWriter`).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCluster;

impl CacheReader for NoCluster {
    fn get(&self, _: &GroupVersionKind, _: Option<&str>, _: &str) -> Result<Option<Vec<u8>>, CallError> {
        Ok(None)
    }

    fn list(
        &self,
        _: &GroupVersionKind,
        _: Option<&str>,
        _: Option<&str>,
        _: usize,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        Ok(Vec::new())
    }

    fn by_index(&self, _: &GroupVersionKind, _: &str, _: &str, _: usize) -> Result<Vec<Vec<u8>>, CallError> {
        Ok(Vec::new())
    }

    /// Nothing to hide: nothing is cached.
    fn hide(&self, _: Hidden) {}
}

#[async_trait]
impl ApiWriter for NoCluster {
    async fn send(&self, _: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        Err(CallError::Unavailable(format!("{}: no cluster (the plugin is loaded to be checked)", call.summary())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ApiWriterExt, ObjectRef};

    #[tokio::test]
    async fn no_cluster_reads_nothing_and_sends_nothing_saying_why() {
        let kind = GroupVersionKind::gvk("", "v1", "ConfigMap");
        assert_eq!(CacheReader::get(&NoCluster, &kind, Some("a"), "c"), Ok(None));
        assert_eq!(NoCluster.list(&kind, None, None, usize::MAX), Ok(Vec::new()));
        let target = ObjectRef { kind, namespace: Some("a".into()), name: "c".into() };
        let refused = ApiWriterExt::get(&NoCluster, &Caller::new("p"), target).await.unwrap_err();
        assert!(matches!(&refused, CallError::Unavailable(m) if m.contains("no cluster")), "{refused:?}");
    }
}
