//! The attacks of issue 49 against a real kube-apiserver + etcd: what the host judges is what it
//! sends (an address a URL would read as another object is refused), a status write is judged
//! by what it does, and the API server's own policy refuses the same status write when the
//! request reaches it from a plugin identity that RBAC allows everything.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubewasm_host::identity::Identities;
use kubewasm_testenv::ControlPlane;
use serde_json::json;

use common::examples::{CONVERGE, deploy_dir};
use common::hostile::{
    Breaches, bind_cluster_admin, calls, config_map_kind, host_namespace, hostile, marker, namespace_kind,
};
use common::{eventually, run_ok};

/// Waits until ConfigMap `ns/name` exists: the reconcile made every call before it.
async fn written(client: &kube::Client, ns: &str, name: &str) {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    eventually(&format!("ConfigMap {ns}/{name} written"), CONVERGE, || async { api.get_opt(name).await.unwrap() })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_spelled_as_a_path_to_a_secret_reads_no_secret() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let host_ns = host_namespace(&client).await;
    let inside = cp.namespace("depth-path").await;
    let secret = json!({"metadata": {"name": "depth-pull"}, "stringData": {"token": "s3cret"}});
    let secrets = Api::<Secret>::namespaced(client.clone(), host_ns);
    secrets.create(&PostParams::default(), &serde_json::from_value(secret).unwrap()).await.unwrap();

    // A ConfigMap read, as the authorizer judges it; in a URL, a read of the host's Secret.
    let spelled = format!("{host_ns}/secrets/depth-pull?x=");
    // Unconfined, as the attack needs (a confined plugin's namespace is checked against its
    // scope); only the labelled trigger makes the calls, not the marker it writes.
    let settings = json!({"selector": "depth=path", "owns": [config_map_kind()], "onSelected": [
        {"op": "get", "kind": config_map_kind(), "namespace": spelled, "name": "c"},
        {"op": "get", "kind": config_map_kind(), "namespace": "$trigger", "name": "../../secrets/depth-pull"},
        marker("path-done"),
    ]});
    let dir = tempfile::tempdir().unwrap();
    let mut app = common::app(&client);
    // Secrets granted in its own namespace only: the host's are what the spelling reaches for.
    let grants = format!("grants: {{read: [Secret], sensitive: {{namespaces: [{inside}]}}}}\n");
    app.add_plugin(&hostile(dir.path(), "path-reader", &grants, settings)).await.unwrap();
    let trigger = json!({"metadata": {"name": "depth-trigger", "labels": {"depth": "path"}}});
    let config_maps = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &inside);
    config_maps.create(&PostParams::default(), &serde_json::from_value(trigger).unwrap()).await.unwrap();
    written(&client, &inside, "path-done").await;

    let mut breaches = Breaches::default();
    let (read, invalid) =
        (calls(&app, "path-reader", "client.get", "ok"), calls(&app, "path-reader", "client.get", "invalid"));
    breaches.check(read == 0.0, || format!("{read} gets answered: the Secret was read through a ConfigMap's address"));
    breaches.check(invalid >= 2.0, || format!("{invalid} gets refused as invalid, not 2"));
    breaches.assert_none("an address a URL reads as another object's");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_json_patch_is_judged_by_what_it_removes_not_by_its_paths() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let inside = cp.namespace("depth-move").await;
    // What a `move` into status would strip: Pod Security Admission's label and a finalizer.
    let guard = json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"},
                                    "annotations": {"kubewasm.test/keep": "yes"}}});
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.patch(&inside, &PatchParams::default(), &Patch::Merge(&guard)).await.unwrap();
    let before = namespaces.get(&inside).await.unwrap().metadata;

    let moved = |from: &str, to: &str| {
        json!({"op": "json-patch-status", "kind": namespace_kind(), "name": "$trigger",
        "body": [{"op": "move", "from": from, "path": to}]})
    };
    let settings = json!({"for": namespace_kind(), "owns": [config_map_kind()], "onSelected": [
        moved("/metadata/labels/pod-security.kubernetes.io~1enforce", "/status/enforce"),
        moved("/metadata/annotations", "/status/annotations"),
        marker("move-done"),
    ]});
    let dir = tempfile::tempdir().unwrap();
    let mut app = common::app(&client);
    let grants = format!("grants: {{namespaces: {{names: [{inside}]}}}}\n");
    app.add_plugin(&hostile(dir.path(), "status-mover", &grants, settings)).await.unwrap();
    written(&client, &inside, "move-done").await;

    let mut breaches = Breaches::default();
    let after = namespaces.get(&inside).await.unwrap().metadata;
    breaches.check(after.labels == before.labels, || format!("labels stripped: {:?}", after.labels));
    breaches
        .check(after.annotations == before.annotations, || format!("annotations stripped: {:?}", after.annotations));
    breaches.refused(&app, "status-mover", "client.patch-status", 2.0);
    breaches.assert_none("a status patch that moves metadata into status");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

/// The second layer on its own: the plugin identity may do anything by RBAC, and no host stands
/// between it and the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_alone_refuses_a_plugin_identitys_status_write_that_changes_metadata() {
    let Some(cp) = ControlPlane::shared() else { return };
    let admin = cp.admin_client().await;
    let mut apply = cp.kubectl();
    apply.args(["apply", "--server-side", "-f"]).arg(deploy_dir().join("base/plugin-mark-policy.yaml"));
    run_ok(apply);
    bind_cluster_admin(&admin, "depth").await;
    let identities = Identities::host(admin.clone()).impersonating("kubewasm-system");
    let as_plugin: Api<Namespace> = Api::all(identities.client("depth"));
    let marked = json!({"metadata": {"name": "depth-api", "labels": {"kubewasm.dev/plugin": "depth",
        "pod-security.kubernetes.io/enforce": "baseline"}, "annotations": {"kubewasm.test/keep": "yes"}}});
    let marked: Namespace = serde_json::from_value(marked).unwrap();
    // The binding takes effect once the API server's RBAC cache has it: until then, forbidden.
    eventually("the plugin identity's create, once bound", Duration::from_secs(30), || async {
        match as_plugin.create(&PostParams::default(), &marked).await {
            Ok(_) => Some(()),
            Err(kube::Error::Api(e)) if e.code == 403 => None,
            Err(e) => panic!("{e}"),
        }
    })
    .await;

    let params = PatchParams::default();
    let strip_label = Patch::Json::<()>(
        serde_json::from_value(json!([{"op": "move", "from": "/metadata/labels/pod-security.kubernetes.io~1enforce",
                                       "path": "/status/enforce"}]))
        .unwrap(),
    );
    // The policy takes effect once the API server has compiled it: until then the write passes,
    // so the label is put back before each try.
    let people: Api<Namespace> = Api::all(admin.clone());
    let relabel = json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}});
    let refused = eventually("the status write refused", Duration::from_secs(30), || async {
        people.patch("depth-api", &params, &Patch::Merge(&relabel)).await.unwrap();
        as_plugin.patch_status("depth-api", &params, &strip_label).await.err()
    })
    .await;
    let expected = "may not change labels, annotations, finalizers or ownerReferences through status";
    assert!(refused.to_string().contains(expected), "{refused}");
    let strip_annotation = Patch::Json::<()>(
        serde_json::from_value(json!([{"op": "remove", "path": "/metadata/annotations/kubewasm.test~1keep"}])).unwrap(),
    );
    let refusal = as_plugin.patch_status("depth-api", &params, &strip_annotation).await.err();
    assert!(refusal.is_some_and(|e| e.to_string().contains(expected)), "annotations are guarded too");
    let condition = json!({"status": {"conditions": [{"type": "Reconciled", "status": "True"}]}});
    as_plugin.patch_status("depth-api", &params, &Patch::Merge(&condition)).await.expect("status itself is writable");
    let after = people.get("depth-api").await.unwrap().metadata;
    assert_eq!(
        after.labels.unwrap_or_default().get("pod-security.kubernetes.io/enforce").map(String::as_str),
        Some("baseline")
    );
}

/// Class 6 of issue 49: a name another plugin made first (or the plugin made under an old name)
/// is refused with the holder named, and an operator's handover gives it to the rightful plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_made_under_another_plugins_name_is_reported_and_handed_over_by_an_operator() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kubewasm_host::handover::Handover;
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("depth-handover").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let trigger = json!({"metadata": {"name": "ho-trigger", "labels": {"depth": "handover"}}});
    let trigger = config_maps.create(&PostParams::default(), &serde_json::from_value(trigger).unwrap()).await.unwrap();
    let owner = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "ho-trigger",
                       "uid": trigger.metadata.uid.unwrap(), "controller": true});
    // Made by the plugin under its old name: marked, and controlled by the trigger.
    let child = json!({"metadata": {"name": "ho-child", "labels": {"kubewasm.dev/plugin": "ho-old"},
                                    "ownerReferences": [owner]}, "data": {"by": "old"}});
    config_maps.create(&PostParams::default(), &serde_json::from_value(child).unwrap()).await.unwrap();

    let settings = json!({"selector": "depth=handover", "owns": [config_map_kind()], "onSelected": [
        {"op": "merge-patch", "kind": config_map_kind(), "namespace": "$trigger", "name": "ho-child",
         "body": {"data": {"by": "new"}}},
    ]});
    let dir = tempfile::tempdir().unwrap();
    let mut app = common::app(&client);
    app.add_plugin(&hostile(dir.path(), "ho-new", "", settings)).await.unwrap();
    let note = eventually("an AccessDenied Event naming the holder", CONVERGE, || async {
        common::hostile::access_denied(&client, &ns, "ho-new").await
    })
    .await;
    assert!(
        note.contains("plugin `ho-old` did")
            && note.contains(&format!("kubewasm handover --from ho-old --to ho-new --kind ConfigMap --namespace {ns}")),
        "{note}"
    );

    let handover = Handover {
        from: "ho-old".into(),
        to: "ho-new".into(),
        kinds: vec!["ConfigMap".parse().unwrap()],
        namespace: Some(ns.clone()),
        dry_run: false,
    };
    let outcomes = handover.run(&client).await.expect("the operator hands it over");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert_eq!(outcomes[0].failed, None, "{outcomes:?}");
    let changed = eventually("the rightful plugin's write", CONVERGE, || async {
        let child = config_maps.get("ho-child").await.unwrap();
        (child.data.as_ref().and_then(|d| d.get("by")).map(String::as_str) == Some("new")).then_some(child)
    })
    .await;
    let mark = changed.metadata.labels.unwrap_or_default().get("kubewasm.dev/plugin").cloned();
    assert_eq!(mark.as_deref(), Some("ho-new"));
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

/// Held-out round of issue 49: a patch or delete is judged on the object the cache holds; one
/// deleted and made again under the same name before the cache heard of it is another object,
/// and the API server refuses the write to it (the judged uid goes with the write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_judged_on_one_object_does_not_reach_another_made_under_its_name() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::DeleteParams;
    use kube::core::GroupVersionKind;
    use kubewasm_host::plugin::api::{
        ApiCall, ApiWriter, CallError, Caller, DeleteOptions, ObjectRef, Patch as HostPatch, PatchOptions,
    };
    use kubewasm_host::writer::KubeWriter;
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("depth-judged-uid").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let make = || async {
        let body = serde_json::from_value(json!({"metadata": {"name": "child"}, "data": {"v": "0"}})).unwrap();
        api.create(&PostParams::default(), &body).await.unwrap().metadata.uid.unwrap()
    };
    let judged = make().await;
    let writer = KubeWriter::new(client.clone());
    let caller = Caller::new("depth-uid");
    let target = ObjectRef {
        kind: GroupVersionKind::gvk("", "v1", "ConfigMap"),
        namespace: Some(ns.clone()),
        name: "child".into(),
    };
    let patch = |patch: HostPatch| ApiCall::Patch {
        target: target.clone(),
        patch,
        options: PatchOptions { judged_uid: Some(judged.clone()), ..PatchOptions::default() },
    };
    let merge = || HostPatch::Merge(json!({"data": {"v": "1"}}));
    let json_patch = || HostPatch::Json(json!([{"op": "replace", "path": "/data/v", "value": "2"}]));
    writer.send(&caller, &patch(merge())).await.expect("the judged object takes the merge patch");
    writer.send(&caller, &patch(json_patch())).await.expect("and the JSON patch");

    // Replaced under the same name: the same writes, judged on the first, reach nothing.
    api.delete("child", &DeleteParams::default()).await.unwrap();
    let replacement = make().await;
    assert_ne!(replacement, judged);
    for call in [patch(merge()), patch(json_patch()), patch(HostPatch::Strategic(json!({"data": {"v": "3"}})))] {
        let refused = writer.send(&caller, &call).await.unwrap_err();
        assert!(matches!(&refused, CallError::Conflict(m) if m.contains("replaced")), "{refused:?}");
    }
    let delete = ApiCall::Delete {
        target: target.clone(),
        options: DeleteOptions { judged_uid: Some(judged.clone()), ..DeleteOptions::default() },
    };
    let refused = writer.send(&caller, &delete).await.unwrap_err();
    assert!(matches!(&refused, CallError::Conflict(_)), "{refused:?}");
    let left = api.get("child").await.unwrap();
    assert_eq!(left.metadata.uid.as_deref(), Some(replacement.as_str()));
    assert_eq!(left.data.unwrap()["v"], "0", "the replacement is untouched");
}
