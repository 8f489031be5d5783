//! sample-controller: kubernetes/sample-controller's controller (the client-go sample the
//! informer and workqueue docs point to), ported to kubewasm in desired-state mode. For each
//! `Foo` (`samplecontroller.k8s.io/v1alpha1`, CRD in deploy/crds/examples/foo.yaml) it wants a
//! Deployment named `spec.deploymentName` running `spec.replicas` nginx pods, controlled by the
//! Foo, and reports the Deployment's `status.availableReplicas` in the Foo's status. As the
//! original: a Foo without a deployment name is an error not retried; a Deployment of that name
//! the Foo does not control is left alone, with a Warning `ErrResourceExists` Event, and retried;
//! a synced Foo gets a Normal `Synced` Event. Unlike the original, a Deployment the Foo no longer
//! names is pruned by the host.

// The original's kind is `Foo`, and its variables are named after it.
#![allow(clippy::disallowed_names)]

use k8s_openapi::api::apps::v1::Deployment;
use kubewasm_sdk::{Desired, DesiredState, Error, Gvk, Registration, Request, Result, cache, events};
use serde_json::{Value, json};

/// The message of the original's `ErrResourceExists` Event.
pub const MESSAGE_RESOURCE_EXISTS: &str = "Resource %q already exists and is not managed by Foo";

fn foo_kind() -> Gvk {
    Gvk { group: "samplecontroller.k8s.io".into(), version: "v1alpha1".into(), kind: "Foo".into() }
}

/// The Deployment `foo` wants (`newDeployment` in the original; the host adds the Foo as owner).
fn deployment(foo: &Value, name: &str, namespace: &str) -> Value {
    let labels = json!({"app": "nginx", "controller": foo["metadata"]["name"]});
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": foo.pointer("/spec/replicas").cloned().unwrap_or(json!(1)),
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels},
                         "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}},
        },
    })
}

struct SampleController;

impl DesiredState for SampleController {
    fn describe() -> Registration {
        Registration::reconciles_kind(foo_kind()).owns::<Deployment>()
    }

    fn desired(request: Request) -> Result<Option<Desired>> {
        let namespace = request.namespace.as_deref().unwrap_or_default();
        let Some(foo) = cache::get_json(&foo_kind(), Some(namespace), &request.name)? else { return Ok(None) };
        let regarding = kubewasm_sdk::object_ref_json(&foo)?;
        let Some(name) = foo.pointer("/spec/deploymentName").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
            // The original logs this and does not requeue: only an edit of the Foo fixes it.
            return Err(Error::terminal(format!("{namespace}/{}: deployment name must be specified", request.name)));
        };
        let existing = cache::get::<Deployment>(Some(namespace), name)?;
        if let Some(existing) = &existing {
            let owned = serde_json::to_value(existing)?;
            if !kubewasm_sdk::is_controlled_by_json(&owned, &foo) {
                let message = MESSAGE_RESOURCE_EXISTS.replace("%q", &format!("{name:?}"));
                events::warning(&regarding, "ErrResourceExists", &message)?;
                return Err(Error::msg(message));
            }
        }
        let available = existing.and_then(|d| d.status).and_then(|s| s.available_replicas).unwrap_or(0);
        events::normal(&regarding, "Synced", "Foo synced successfully")?;
        let desired = Desired::new().child(&deployment(&foo, name, namespace));
        Ok(Some(desired.status(&json!({"availableReplicas": available}))))
    }
}

kubewasm_sdk::export_desired_state!(SampleController);
