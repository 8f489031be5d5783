use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use super::*;
use crate::informer::CachedObject;
use crate::plugin::api::{ApiWriterExt, DeleteOptions, Patch, PatchOptions};

const MANAGER: &str = "kubewasm/cm";

/// The plugin's cache: one ConfigMap (or none), as `for_write` hands it out once synced.
#[derive(Default)]
struct Cache(Mutex<Option<Arc<CachedObject>>>);

impl Cache {
    /// Caches the ConfigMap at `rv` holding `data`, with `fields` as the manager's Apply entry.
    fn holds(&self, rv: &str, data: Value, fields: Value) {
        let json = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "a", "resourceVersion": rv}, "data": data});
        let managed = json!([{"manager": MANAGER, "operation": "Apply", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": fields}]);
        let object = CachedObject::from_json(serde_json::to_vec(&json).unwrap()).unwrap();
        *self.0.lock() = Some(Arc::new(object.with_managed_fields(Some(serde_json::to_vec(&managed).unwrap()))));
    }
}

impl CacheReader for Cache {
    fn get(&self, _: &GroupVersionKind, _: Option<&str>, _: &str) -> Result<Option<Vec<u8>>, CallError> {
        Ok(self.0.lock().as_ref().map(|o| o.json().to_vec()))
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
    fn for_write(&self, _: &GroupVersionKind, _: Option<&str>, _: &str) -> Option<Arc<CachedObject>> {
        self.0.lock().clone()
    }
    /// Holds one object of the test's own: nothing to hide.
    fn hide(&self, _: crate::plugin::api::Hidden) {}
}

/// The API server: counts requests and answers each write with the next resourceVersion.
#[derive(Default)]
struct Server {
    requests: AtomicU64,
}

impl Server {
    fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    fn stored(&self, mut body: Value) -> Result<Vec<u8>, CallError> {
        let rv = 10 + self.requests.fetch_add(1, Ordering::SeqCst);
        body["metadata"]["resourceVersion"] = json!(rv.to_string());
        Ok(serde_json::to_vec(&body).unwrap())
    }
}

#[async_trait]
impl ApiWriter for Server {
    async fn send(&self, _: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        match call {
            ApiCall::Apply { object, .. } | ApiCall::ApplyStatus { object, .. } | ApiCall::Create(object) => {
                self.stored(object.body.clone()).map(ApiReply::Object)
            }
            ApiCall::Patch { patch: Patch::Merge(body), .. } => self.stored(body.clone()).map(ApiReply::Object),
            ApiCall::Patch { .. } => unreachable!("the tests merge"),
            ApiCall::Delete { .. } => {
                self.requests.fetch_add(1, Ordering::SeqCst);
                Ok(ApiReply::Done)
            }
            ApiCall::Get(_) => Ok(ApiReply::Found(None)),
            ApiCall::Event(_) => Ok(ApiReply::Done),
        }
    }
}

struct Setup {
    cache: Arc<Cache>,
    server: Arc<Server>,
    writer: ElidingWriter,
    registry: prometheus::Registry,
    caller: Caller,
}

fn setup(host: bool, plugin: bool) -> Setup {
    let registry = prometheus::Registry::new();
    let elision = Elision::new(host, PluginMetrics::register(&registry).unwrap());
    let (cache, server) = (Arc::new(Cache::default()), Arc::new(Server::default()));
    let writer = elision.writer(server.clone(), cache.clone(), plugin);
    Setup { cache, server, writer, registry, caller: Caller::new("cm") }
}

impl Setup {
    fn written(&self, outcome: &str) -> u64 {
        let families = self.registry.gather();
        let family = families.iter().find(|f| f.name() == "kubewasm_plugin_writes_total");
        family
            .into_iter()
            .flat_map(|f| f.get_metric())
            .find(|m| m.get_label().iter().any(|l| l.name() == "outcome" && l.value() == outcome))
            .map_or(0, |m| m.get_counter().get_value() as u64)
    }
}

fn config_map(data: Value) -> TypedObject {
    let body =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}, "data": data});
    TypedObject::from_json(&serde_json::to_vec(&body).unwrap()).unwrap()
}

fn owned_k() -> Value {
    json!({"f:data": {"f:k": {}}})
}

#[tokio::test]
async fn an_apply_the_cache_already_holds_is_answered_from_it_and_counted_unchanged() {
    let s = setup(true, true);
    s.cache.holds("5", json!({"k": "v"}), owned_k());
    let answer = s.writer.apply(&s.caller, config_map(json!({"k": "v"})), false).await.unwrap();
    assert_eq!(s.server.requests(), 0);
    assert_eq!(resource_version(&answer).as_deref(), Some("5"), "the cached object is the answer");
    assert_eq!((s.written("unchanged"), s.written("sent")), (1, 0));
    s.writer.apply(&s.caller, config_map(json!({"k": "w"})), false).await.unwrap();
    assert_eq!((s.server.requests(), s.written("sent")), (1, 1), "another value is sent");
}

#[tokio::test]
async fn an_apply_before_the_cache_shows_the_plugins_last_write_is_sent() {
    let s = setup(true, true);
    s.cache.holds("5", json!({"k": "v"}), owned_k());
    s.writer.apply(&s.caller, config_map(json!({"k": "w"})), false).await.unwrap();
    // The server answered resourceVersion 10; the cache still shows 5, where `k: v` matches.
    s.writer.apply(&s.caller, config_map(json!({"k": "v"})), false).await.unwrap();
    assert_eq!(s.server.requests(), 2, "a lagging cache is not trusted");
    s.cache.holds("11", json!({"k": "v"}), owned_k());
    s.writer.apply(&s.caller, config_map(json!({"k": "v"})), false).await.unwrap();
    assert_eq!(s.server.requests(), 2, "once the cache shows the last write, it decides");
    s.writer.apply(&s.caller, config_map(json!({"k": "v"})), false).await.unwrap();
    assert_eq!(s.server.requests(), 2);
}

#[tokio::test]
async fn patches_creates_and_deletes_are_sent_and_a_delete_holds_elision_until_the_next_write() {
    let s = setup(true, true);
    s.cache.holds("5", json!({"k": "v"}), owned_k());
    let target = config_map(json!({})).target;
    let patch = Patch::Merge(json!({"metadata": {"name": "c"}, "data": {"k": "v"}}));
    s.writer.patch(&s.caller, target.clone(), patch, PatchOptions::default()).await.unwrap();
    s.cache.holds("10", json!({"k": "v"}), owned_k());
    s.writer.create(&s.caller, config_map(json!({"k": "v"}))).await.unwrap();
    s.cache.holds("11", json!({"k": "v"}), owned_k());
    s.writer.delete(&s.caller, target.clone(), DeleteOptions::default()).await.unwrap();
    assert_eq!(s.server.requests(), 3);
    s.writer.apply(&s.caller, config_map(json!({"k": "v"})), false).await.unwrap();
    assert_eq!(s.server.requests(), 4, "the cache may still hold what was deleted");
}

#[tokio::test]
async fn the_host_switch_and_the_plugins_setting_each_turn_elision_off() {
    for (host, plugin) in [(false, true), (true, false)] {
        let s = setup(host, plugin);
        s.cache.holds("5", json!({"k": "v"}), owned_k());
        s.writer.apply(&s.caller, config_map(json!({"k": "v"})), false).await.unwrap();
        assert_eq!((s.server.requests(), s.written("sent")), (1, 1), "host {host}, plugin {plugin}");
    }
}

#[tokio::test]
async fn an_object_the_cache_cannot_vouch_for_is_sent() {
    let s = setup(true, true);
    s.writer.apply(&s.caller, config_map(json!({"k": "v"})), false).await.unwrap();
    assert_eq!(s.server.requests(), 1, "not cached, or its kind not synced");
    s.cache.holds("10", json!({"k": "v"}), json!({"f:data": {"f:k": {}, "f:gone": {}}}));
    s.writer.apply(&s.caller, config_map(json!({"k": "v"})), false).await.unwrap();
    assert_eq!(s.server.requests(), 2, "the manager owns a field the body drops");
}
