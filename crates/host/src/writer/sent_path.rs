//! Tests that the path a plugin's request is sent to names exactly the object the authorizer
//! judged, for any strings a plugin passes: checked on the HTTP requests `KubeWriter` makes.

use std::sync::Arc;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use kube::core::GroupVersionKind;
use parking_lot::Mutex;
use proptest::prelude::*;
use serde_json::json;

use super::KubeWriter;
use crate::plugin::api::{ApiCall, ApiWriter, CallError, Caller, DeleteOptions, ObjectRef, Patch, PatchOptions};

/// A writer whose API server serves ConfigMaps (discovery) and answers every object request
/// 404, recording each object request's path and query.
fn writer() -> (KubeWriter, Arc<Mutex<Vec<String>>>) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let seen = sent.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let seen = seen.clone();
        async move {
            let uri = request.uri();
            let body = if uri.path() == "/api/v1" {
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
                    {"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap",
                     "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]})
            } else {
                seen.lock().push(uri.path_and_query().map(ToString::to_string).unwrap_or_default());
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
            };
            let status = if uri.path() == "/api/v1" { 200 } else { 404 };
            let response = Response::builder().status(status).body(Body::from(serde_json::to_vec(&body).unwrap()));
            Ok::<_, std::convert::Infallible>(response.unwrap())
        }
    });
    (KubeWriter::new(Client::new(service, "default")), sent)
}

fn config_map(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind: GroupVersionKind::gvk("", "v1", "ConfigMap"),
        namespace: Some(namespace.into()),
        name: name.into(),
    }
}

/// Strings a hostile plugin might pass: mostly name characters, with every character a URL
/// path reads specially mixed in.
fn hostile() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-z0-9./?#%:@_ \\-]{0,24}").unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_request_is_sent_to_the_path_of_the_object_it_names_or_not_at_all(
        namespace in hostile(), name in hostile(), verb in 0..3u8,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let target = config_map(&namespace, &name);
        let call = match verb {
            0 => ApiCall::Get(target),
            1 => ApiCall::Delete { target, options: DeleteOptions::default() },
            _ => ApiCall::Patch { target, patch: Patch::Merge(json!({})), options: PatchOptions::default() },
        };
        // kube's client spawns its buffer on the runtime it is made in.
        let (result, sent) = runtime.block_on(async {
            let (writer, sent) = writer();
            let result = writer.send(&Caller::new("p"), &call).await;
            (result, sent.lock().clone())
        });
        match result {
            Err(CallError::Invalid(_)) => prop_assert!(sent.is_empty(), "refused, yet sent {sent:?}"),
            _ => {
                let judged = format!("/api/v1/namespaces/{namespace}/configmaps/{name}");
                prop_assert_eq!(sent.len(), 1);
                let (path, query) = sent[0].split_once('?').unwrap_or((sent[0].as_str(), ""));
                prop_assert_eq!(path, judged.as_str());
                prop_assert_eq!(path.split('/').count(), 7, "one segment each for namespace and name");
                prop_assert!(!query.contains("dryRun") && !query.contains('#'), "query {query}");
            }
        }
    }
}

#[tokio::test]
async fn a_namespace_spelled_as_a_path_to_a_secret_is_refused_before_anything_is_sent() {
    let (writer, sent) = writer();
    let call = ApiCall::Get(config_map("kubewasm-system/secrets/pull?x=", "c"));
    let result = writer.send(&Caller::new("p"), &call).await;
    assert!(matches!(result, Err(CallError::Invalid(ref m)) if m.contains("the namespace")), "{result:?}");
    assert!(sent.lock().is_empty(), "nothing reaches the API server");
}
