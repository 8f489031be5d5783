//! Recording a reconcile against a cluster: the objects it read from the cache and the writes
//! it would make, into a fixture file that `kubewasm test` replays without the cluster.
//!
//! The plugin runs over the real informers of the cluster (same wiring as the host) with the
//! write path in recording mode, so recording sends nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::core::GroupVersionKind;
use parking_lot::Mutex;
use serde_json::Value;

use super::fixtures::{RECORDING_API_VERSION, RECORDING_KIND, Recording};
use super::{Harness, Report, Result};
use kubewasm_host::controller::PluginCache;
use kubewasm_host::informer::{InformerParams, SharedInformerFactory};
use kubewasm_host::plugin::api::{CacheReader, CallError, TypedObject};
use kubewasm_host::plugin::{ObjectKey, PluginConfig, Runtime};

/// How long recording waits for the plugin's caches to sync.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// A [`CacheReader`] that remembers every object a read returned.
pub struct ReadRecorder {
    inner: Arc<PluginCache>,
    seen: Mutex<BTreeMap<(String, String, String), Vec<u8>>>,
}

impl ReadRecorder {
    /// Records the reads served by `inner`.
    pub fn new(inner: Arc<PluginCache>) -> Self {
        Self { inner, seen: Mutex::default() }
    }

    fn saw(&self, objects: &[Vec<u8>]) {
        let mut seen = self.seen.lock();
        for bytes in objects {
            if let Ok(object) = TypedObject::from_json(bytes) {
                let t = object.target;
                let id = (format!("{}/{}", t.kind.group, t.kind.kind), t.namespace.unwrap_or_default(), t.name);
                seen.insert(id, bytes.clone());
            }
        }
    }

    /// The objects read since the last call, by kind, namespace and name.
    pub fn take(&self) -> Vec<Value> {
        let seen = std::mem::take(&mut *self.seen.lock());
        seen.into_values().filter_map(|b| serde_json::from_slice(&b).ok()).collect()
    }
}

impl CacheReader for ReadRecorder {
    fn get(&self, kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Result<Option<Vec<u8>>, CallError> {
        let found = self.inner.get(kind, namespace, name)?;
        self.saw(found.as_slice());
        Ok(found)
    }

    fn list(
        &self,
        kind: &GroupVersionKind,
        ns: Option<&str>,
        selector: Option<&str>,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        let found = self.inner.list(kind, ns, selector, max_bytes)?;
        self.saw(&found);
        Ok(found)
    }

    fn by_index(
        &self,
        kind: &GroupVersionKind,
        index: &str,
        value: &str,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        let found = self.inner.by_index(kind, index, value, max_bytes)?;
        self.saw(&found);
        Ok(found)
    }

    fn in_scope(&self, namespace: &str) -> bool {
        self.inner.in_scope(namespace)
    }

    fn hide(&self, hidden: kubewasm_host::plugin::api::Hidden) {
        self.inner.hide(hidden);
    }

    fn for_write(
        &self,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<kubewasm_host::informer::CachedObject>> {
        self.inner.for_write(kind, namespace, name)
    }
}

/// Reconciles each of `keys` once over the cluster's caches (`runtime`'s wall clock fixed at
/// `now`, which the recording keeps) and returns, per key, the fixture
/// file (YAML) that replays it: a [`Recording`] header with the report, then every object read.
pub async fn record(
    runtime: &Runtime,
    client: kube::Client,
    name: &str,
    wasm: Arc<[u8]>,
    config: PluginConfig,
    keys: &[ObjectKey],
    now: &str,
) -> Result<Vec<(ObjectKey, String)>> {
    let factory = SharedInformerFactory::new(client, &prometheus::Registry::new())?;
    let informer = |gvk: &GroupVersionKind, selector: Option<&str>| {
        let (factory, gvk) = (factory.clone(), gvk.clone());
        let params = InformerParams::default().labels(selector.unwrap_or_default());
        async move { Ok::<_, super::Error>(factory.informer(&gvk, params).await?) }
    };
    let (harness, reads) =
        Harness::load_with(runtime, name, wasm, config, |c| Arc::new(ReadRecorder::new(c)), informer, None).await?;
    harness.wait_for_sync(SYNC_TIMEOUT).await?;
    let mut files = Vec::new();
    for key in keys {
        reads.take();
        let report = Report(vec![harness.reconcile(key).await]);
        let header = Recording {
            api_version: RECORDING_API_VERSION.into(),
            kind: RECORDING_KIND.into(),
            plugin: name.into(),
            key: key.to_string(),
            expect: report.to_value(),
            now: Some(now.to_owned()),
        };
        let mut text =
            format!("# kubewasm record: one reconcile of {key} by plugin {name}; replay with kubewasm test\n");
        text.push_str(&serde_yaml::to_string(&header).unwrap_or_default());
        for object in reads.take() {
            text.push_str("---\n");
            text.push_str(&serde_yaml::to_string(&object).unwrap_or_default());
        }
        files.push((key.clone(), text));
    }
    Ok(files)
}
