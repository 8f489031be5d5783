//! A plugin's apply of an object its cache does not hold, against a real kube-apiserver + etcd:
//! sent only if no such object exists (a resourceVersion no object has), so the host reads
//! nothing before a first write; when the object exists after all (created by another client,
//! or the plugin's own write the cache has not seen yet), the API server refuses it with a
//! conflict and the host judges it again on the server's copy.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kubewasm_host::app::App;
use kubewasm_host::hotload::Options;
use kubewasm_host::plugin::api::{ApiCall, ApiReply, ApiWriter, CallError, Caller, Scope};
use kubewasm_host::writer::KubeWriter;
use kubewasm_testenv::ControlPlane;
use parking_lot::Mutex;
use serde_json::json;

use common::eventually;
use common::examples::CONVERGE;
use common::hostile::{forbidden_calls, hostile_legacy};

/// One request of the host as the API server answered it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sent {
    verb: &'static str,
    name: String,
    only_if_absent: bool,
    answer: &'static str,
}

fn sent(verb: &'static str, name: &str, only_if_absent: bool, answer: &'static str) -> Sent {
    Sent { verb, name: name.into(), only_if_absent, answer }
}

/// The real writer, keeping every request it sends, and making the two races a cache miss can
/// lose, each once, just before the host's first write of the object: another client creates
/// `taken`; the plugin's own earlier write of `lagging` lands and the cache has not seen it.
struct Racing {
    inner: KubeWriter,
    client: kube::Client,
    sent: Mutex<Vec<Sent>>,
    raced: Mutex<Vec<String>>,
}

impl Racing {
    /// The requests naming `name`, in order.
    fn naming(&self, name: &str) -> Vec<Sent> {
        self.sent.lock().iter().filter(|s| s.name == name).cloned().collect()
    }

    async fn race(&self, caller: &Caller, call: &ApiCall) {
        let ApiCall::Apply { object, force } = call else { return };
        let name = object.target.name.clone();
        if !call.only_if_absent() || self.raced.lock().contains(&name) {
            return;
        }
        self.raced.lock().push(name.clone());
        let ns = object.target.namespace.as_deref().unwrap();
        match name.as_str() {
            "taken" => {
                let theirs = json!({"metadata": {"name": "taken"}, "data": {"k": "theirs"}});
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
                api.create(&PostParams::default(), &serde_json::from_value(theirs).unwrap()).await.unwrap();
            }
            "lagging" => {
                let mut earlier = object.clone();
                earlier.only_if_absent = false;
                earlier.body["data"]["k"] = json!("earlier");
                self.inner.send(caller, &ApiCall::Apply { object: earlier, force: *force }).await.unwrap();
            }
            _ => {}
        }
    }
}

#[async_trait]
impl ApiWriter for Racing {
    async fn send(&self, caller: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        self.race(caller, call).await;
        let result = self.inner.send(caller, call).await;
        let verb = match call {
            ApiCall::Apply { .. } => "apply",
            ApiCall::Get(_) => "get",
            _ => "other",
        };
        let answer = match &result {
            Ok(_) => "ok",
            Err(CallError::Conflict(_)) => "conflict",
            Err(_) => "error",
        };
        let name = call.target().name.clone();
        self.sent.lock().push(Sent { verb, name, only_if_absent: call.only_if_absent(), answer });
        result
    }

    async fn scope(&self, kind: &GroupVersionKind) -> Result<Scope, CallError> {
        self.inner.scope(kind).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_apply_reads_nothing_and_one_that_finds_the_object_after_all_is_judged_on_the_servers_copy() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("first-writes").await;
    let writer = Arc::new(Racing {
        inner: KubeWriter::new(client.clone()),
        client: client.clone(),
        sent: Mutex::default(),
        raced: Mutex::default(),
    });
    let mut app = App::with_writer(client.clone(), None, None, Options::default(), writer.clone()).unwrap();
    let apply = |name: &str, k: &str| {
        json!({"op": "apply", "namespace": "$trigger", "name": name, "controlled": true, "force": true,
               "body": {"data": {"k": k}}})
    };
    let settings = json!({
        "forSelector": format!("kubewasm.test/first-writes={ns}"),
        "calls": [apply("new", "mine"), apply("taken", "mine"), apply("lagging", "mine"), apply("done", "yes")],
    });
    let dir = tempfile::tempdir().unwrap();
    app.add_plugin(&hostile_legacy(dir.path(), "first-writes", "", settings)).await.unwrap();
    let patch = json!({"metadata": {"labels": {"kubewasm.test/first-writes": ns}}});
    Api::<Namespace>::all(client.clone()).patch(&ns, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    eventually("the reconcile's last apply", CONVERGE, || async { config_maps.get_opt("done").await.unwrap() }).await;

    // The reconcile fails on `taken` and is retried, making its requests again: the first
    // reconcile's come first.
    let data = |cm: ConfigMap| cm.data.unwrap_or_default().get("k").cloned().unwrap_or_default();
    let managers = |cm: &ConfigMap| -> Vec<String> {
        cm.metadata.managed_fields.iter().flatten().filter_map(|f| f.manager.clone()).collect()
    };
    for name in ["new", "done"] {
        assert_eq!(
            writer.naming(name).first(),
            Some(&sent("apply", name, true, "ok")),
            "{name}: created, no read first"
        );
    }
    let taken = writer.naming("taken");
    assert_eq!(
        taken.get(..2),
        Some(&[sent("apply", "taken", true, "conflict"), sent("get", "taken", false, "ok")][..]),
        "another client's object: refused by the API server, then read: {taken:?}"
    );
    assert!(!taken.iter().any(|s| s.verb == "apply" && s.answer == "ok"), "never written: {taken:?}");
    let object = config_maps.get("taken").await.unwrap();
    assert!(!managers(&object).contains(&"kubewasm/first-writes".to_owned()), "{:?}", managers(&object));
    assert_eq!(data(object), "theirs", "another client's object is not taken over");
    assert!(forbidden_calls(&app, "first-writes", "client.apply") >= 1.0, "the host refused it");
    let lagging = writer.naming("lagging");
    assert_eq!(
        lagging.get(..3),
        Some(
            &[
                sent("apply", "lagging", true, "conflict"),
                sent("get", "lagging", false, "ok"),
                sent("apply", "lagging", false, "ok"),
            ][..]
        ),
        "the plugin's own object: refused by the API server, read, judged and sent again: {lagging:?}"
    );
    assert_eq!(data(config_maps.get("lagging").await.unwrap()), "mine", "the write took effect");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}
