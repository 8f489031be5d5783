//! kubernetes/sample-controller's documented behaviour, ported to kubewasm in desired-state mode
//! (plugins/rust, python, js and go/sample-controller: each test runs every port), against a real
//! kube-apiserver + etcd: a Foo's Deployment made and scaled, its available replicas reported, a
//! Deployment the Foo does not control refused with `ErrResourceExists`, and `Synced` Events. No
//! controller-manager runs Deployments here, so the test writes the Deployment's status itself,
//! as a controller-manager would.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kubewasm_host::app::App;
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

use common::eventually;
use common::examples::example_crd;
use common::hostile::events_from;

const CONVERGE: Duration = Duration::from_secs(60);

/// The Foo CRD (deploy/crds/examples/foo.yaml) installed, and the API of Foos in `ns`.
async fn foos(cp: &ControlPlane, client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let kind = GroupVersionKind::gvk("samplecontroller.k8s.io", "v1alpha1", "Foo");
    example_crd(cp, client, "foo.yaml", "foos.samplecontroller.k8s.io", kind, ns).await
}

/// The ports: the built component of each language.
const PORTS: [&str; 4] =
    ["sample_controller.wasm", "sample_controller_py.wasm", "sample_controller_js.wasm", "sample_controller_go.wasm"];

/// A host serving the sample-controller port `built` for namespace `ns` only.
async fn sample_controller(client: &kube::Client, ns: &str, built: &str) -> App {
    let config = format!("grants: {{namespaces: {{names: [{ns}]}}}}\n");
    let file = common::fixture_file("sample-controller", built, &config);
    let mut app = common::app(client);
    app.add_plugin(&file).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    app
}

async fn create_foo(foos: &Api<DynamicObject>, name: &str, spec: Value) {
    let object = serde_json::from_value(json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
        "metadata": {"name": name}, "spec": spec}))
    .unwrap();
    foos.create(&PostParams::default(), &object).await.unwrap();
}

/// The reasons of the Events about `name` the plugin reported in `ns`.
async fn reasons(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let events = events_from(client, ns, "sample-controller").await;
    let about = events.into_iter().filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name));
    about.filter_map(|e| e.reason).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foo_gets_its_deployment_scaled_its_available_replicas_and_a_synced_event() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    for built in PORTS {
        a_foo_is_synced(&cp, &client, built).await;
    }
}

/// The first test for the port `built`, in a namespace of its own.
async fn a_foo_is_synced(cp: &ControlPlane, client: &kube::Client, built: &str) {
    eprintln!("sample-controller port {built}");
    let client = client.clone();
    let ns = cp.namespace("sample-controller").await;
    let foos = foos(cp, &client, &ns).await;
    let app = sample_controller(&client, &ns, built).await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    create_foo(&foos, "example-foo", json!({"deploymentName": "example-foo", "replicas": 1})).await;

    let made =
        eventually("the Foo's Deployment", CONVERGE, || async { deployments.get_opt("example-foo").await.unwrap() })
            .await;
    let example = foos.get("example-foo").await.unwrap();
    let owner = &made.metadata.owner_references.as_ref().expect("controlled by the Foo")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("Foo", example.metadata.uid.as_deref().unwrap(), Some(true))
    );
    assert_eq!(made.spec.replicas, Some(1));
    assert_eq!(made.spec.template.metadata.unwrap().labels.unwrap()["controller"], "example-foo");

    let scale = json!({"spec": {"replicas": 3}});
    foos.patch("example-foo", &PatchParams::default(), &Patch::Merge(&scale)).await.unwrap();
    eventually("the Deployment scaled to 3", CONVERGE, || async {
        let replicas = deployments.get("example-foo").await.unwrap().spec.replicas;
        (replicas == Some(3)).then_some(())
    })
    .await;

    // What the Deployment controller would report once its pods are available.
    let available = json!({"status": {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3}});
    deployments.patch_status("example-foo", &PatchParams::default(), &Patch::Merge(&available)).await.unwrap();
    eventually("the Foo's status.availableReplicas", CONVERGE, || async {
        let status = foos.get("example-foo").await.unwrap().data.get("status").cloned()?;
        (status["availableReplicas"] == 3).then_some(())
    })
    .await;
    eventually("a Synced event", CONVERGE, || async {
        reasons(&client, &ns, "example-foo").await.contains(&"Synced".to_owned()).then_some(())
    })
    .await;
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_the_foo_does_not_control_is_left_alone_with_err_resource_exists() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    for built in PORTS {
        someone_elses_deployment_is_left_alone(&cp, &client, built).await;
    }
}

/// The second test for the port `built`, in a namespace of its own.
async fn someone_elses_deployment_is_left_alone(cp: &ControlPlane, client: &kube::Client, built: &str) {
    eprintln!("sample-controller port {built}");
    let client = client.clone();
    let ns = cp.namespace("sample-exists").await;
    let foos = foos(cp, &client, &ns).await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let labels = json!({"app": "someone-elses"});
    let theirs = serde_json::from_value(json!({"metadata": {"name": "taken"}, "spec": {"replicas": 2,
        "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}))
    .unwrap();
    deployments.create(&PostParams::default(), &theirs).await.unwrap();
    let app = sample_controller(&client, &ns, built).await;
    create_foo(&foos, "wants-taken", json!({"deploymentName": "taken", "replicas": 1})).await;

    eventually("an ErrResourceExists event", CONVERGE, || async {
        reasons(&client, &ns, "wants-taken").await.contains(&"ErrResourceExists".to_owned()).then_some(())
    })
    .await;
    let taken = deployments.get("taken").await.unwrap();
    assert_eq!(taken.spec.replicas, Some(2), "someone else's Deployment is not scaled");
    assert!(taken.metadata.owner_references.is_none(), "nor taken over");
    assert!(foos.get("wants-taken").await.unwrap().data.get("status").is_none(), "nor reported as the Foo's");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}
