//! The attacks of issue 33, tried by a hostile plugin against a real kube-apiserver + etcd: each
//! test names the secure behaviour, makes the attack's calls, waits for a marker the plugin
//! writes after them, then checks that the victim is unchanged and the calls were refused.
//! Cleanup of a plugin's own children after their owner left its selection must keep working.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm_host::app::App;
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

use common::eventually;
use common::examples::CONVERGE;
use common::hostile::{
    Breaches, access_denied, config_map_kind, deployment_kind, events_from, host_namespace, hostile, hostile_legacy,
    lease_kind, marker, namespace_kind,
};

fn app(client: &kube::Client) -> App {
    common::app(client)
}

async fn create<K>(api: &Api<K>, body: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), &serde_json::from_value(body).unwrap()).await.unwrap()
}

async fn label(client: &kube::Client, namespace: &str, labels: Value) {
    let patch = json!({"metadata": {"labels": labels}});
    Api::<Namespace>::all(client.clone())
        .patch(namespace, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Waits until ConfigMap `ns/name` exists.
async fn written(client: &kube::Client, ns: &str, name: &str) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    eventually(&format!("ConfigMap {ns}/{name} written"), CONVERGE, || async { api.get_opt(name).await.unwrap() }).await
}

fn managers(meta: &kube::api::ObjectMeta) -> Vec<String> {
    meta.managed_fields.iter().flatten().filter_map(|f| f.manager.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_reaches_only_objects_the_plugin_reconciles_and_changes_only_status() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let inside = cp.namespace("atk-status-in").await;
    let victim = cp.namespace("atk-status-victim").await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let (victim_before, inside_before) =
        (namespaces.get(&victim).await.unwrap(), namespaces.get(&inside).await.unwrap());

    // Confined to `inside`, it names `inside` as the namespace of a cluster-scoped Namespace
    // that is not, and patches its /status, which keeps metadata: labels (pulling it into a
    // selector scope), a finalizer (stuck in Terminating), an ownerReference (garbage
    // collected with `inside`). Then relabels its own Namespace through /status, and reads
    // the victim past the cache.
    let settings = json!({"for": namespace_kind(), "owns": [config_map_kind()], "onSelected": [
        {"op": "merge-patch-status", "kind": namespace_kind(), "namespace": inside, "name": victim, "controlled": true,
         "body": {"metadata": {"labels": {"kubewasm.test/pwned": "yes"}, "finalizers": ["kubewasm.test/hostile"]}}},
        {"op": "merge-patch-status", "kind": namespace_kind(), "name": "$trigger",
         "body": {"metadata": {"labels": {"kubewasm.test/relabelled": "yes"}}}},
        {"op": "get", "kind": namespace_kind(), "name": victim},
        marker("status-done"),
    ]});
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&client);
    let grants = format!("grants: {{namespaces: {{names: [{inside}]}}}}\n");
    app.add_plugin(&hostile(dir.path(), "status-writer", &grants, settings)).await.unwrap();
    written(&client, &inside, "status-done").await;

    let mut breaches = Breaches::default();
    let after = namespaces.get(&victim).await.unwrap();
    let (before, now) = (&victim_before.metadata, &after.metadata);
    breaches.check(now.labels == before.labels, || format!("{victim} relabelled: {:?}", now.labels));
    breaches.check(now.finalizers == before.finalizers, || format!("{victim} finalizers: {:?}", now.finalizers));
    let owners = || format!("{victim} owned: {:?}", now.owner_references);
    breaches.check(now.owner_references == before.owner_references, owners);
    let own = namespaces.get(&inside).await.unwrap().metadata.labels;
    breaches.check(own == inside_before.metadata.labels, || format!("{inside} relabelled by /status: {own:?}"));
    breaches.refused(&app, "status-writer", "client.patch-status", 2.0);
    breaches.refused(&app, "status-writer", "client.get", 1.0);
    breaches.assert_none("status writes outside the plugin's objects or beyond status, and the uncached get");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_apply_to_another_namespaces_object_is_judged_on_that_object_not_on_its_body() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let trigger = cp.namespace("atk-miss").await;
    let elsewhere = cp.namespace("atk-miss-victim").await;
    let victims: Api<ConfigMap> = Api::namespaced(client.clone(), &elsewhere);
    let victim = create(&victims, json!({"metadata": {"name": "victim"}, "data": {"k": "original"}})).await;

    // Contract 0.1, with a watch selector the (unlabelled) victim does not match. It once
    // narrowed the ConfigMap informer the owned kind shared, so the cache missed the victim and
    // only the body was checked, whose controller reference names the plugin's own Namespace.
    // Owned kinds are now cached whole (`controller::wiring`), so the victim is judged on its
    // cached copy; one missing from the cache would go out only if absent and, on the 409, be
    // judged on the server's copy (`first_writes`).
    let settings = json!({
        "forSelector": format!("kubewasm.test/hostile-legacy={trigger}"),
        "watchSelector": format!("kubewasm.test/watched={trigger}"),
        "calls": [
            {"op": "apply", "namespace": elsewhere, "name": "victim", "controlled": true, "force": true,
             "body": {"data": {"k": "pwned"}}},
            {"op": "apply", "namespace": "$trigger", "name": "miss-done", "controlled": true, "body": {"data": {"done": "yes"}}},
        ],
    });
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&client);
    app.add_plugin(&hostile_legacy(dir.path(), "cache-miss", "", settings)).await.unwrap();
    label(&client, &trigger, json!({"kubewasm.test/hostile-legacy": trigger})).await;
    written(&client, &trigger, "miss-done").await;

    let mut breaches = Breaches::default();
    let after = victims.get("victim").await.unwrap();
    breaches.check(after.data == victim.data, || format!("{elsewhere}/victim overwritten: {:?}", after.data));
    let owners = &after.metadata.owner_references;
    breaches.check(owners.is_none(), || format!("{elsewhere}/victim made owned: {owners:?}"));
    let managers = managers(&after.metadata);
    breaches.check(!managers.contains(&"kubewasm/cache-miss".into()), || format!("field managers {managers:?}"));
    breaches.refused(&app, "cache-miss", "client.apply", 1.0);
    breaches.assert_none("a forced apply of another Namespace's object whose body claims the plugin's own");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_published_only_about_objects_in_scope_and_never_in_the_hosts_namespace() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let inside = cp.namespace("atk-events-in").await;
    let outside = cp.namespace("atk-events-out").await;
    let host = host_namespace(&client).await;
    // Every object an Event regards exists: a refusal must not be for want of the object.
    create(&Api::<ConfigMap>::namespaced(client.clone(), &outside), json!({"metadata": {"name": "victim"}})).await;
    let host_config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), host);
    for name in ["events-confined", "events-unconfined"] {
        create(&host_config_maps, json!({"metadata": {"name": name}})).await;
    }

    // A plugin confined to `inside` reports about a ConfigMap outside and one in the host's
    // namespace; one confined nowhere reports about the host's namespace. Each then reports
    // about `<trigger>.<plugin>`: the Events the test waits for. Every Event regards an object
    // of its own: the host names an Event after its object and the time of the batch sending
    // it, so of two Events about one object in one batch only the first is created.
    let about = |ns: &str, name: &str| json!({"op": "event", "kind": config_map_kind(), "namespace": ns, "name": name});
    let selector = format!("kubewasm.test/hostile={inside}");
    let confined = format!("grants: {{namespaces: {{names: [{inside}]}}}}\n");
    let plugins =
        [("events-confined", confined, vec![about(&outside, "victim")]), ("events-unconfined", String::new(), vec![])];
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&client);
    for (name, grants, calls) in &plugins {
        let mut calls = calls.clone();
        calls.extend([about(host, name), about("$trigger", &format!("$trigger.{name}"))]);
        let settings = json!({"owns": [config_map_kind()], "selector": selector, "onSelected": calls});
        app.add_plugin(&hostile(dir.path(), name, grants, settings)).await.unwrap();
    }
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;

    // The host sends Events from one queue, a batch at a time. The Events about `second` were
    // queued after those about `first` had been sent, so they are in a later batch: once they
    // are there, every Event queued before those about `first` has been sent or refused.
    let triggers: Api<ConfigMap> = Api::namespaced(client.clone(), &inside);
    for trigger in ["first", "second"] {
        for (plugin, _, _) in &plugins {
            create(&triggers, json!({"metadata": {"name": format!("{trigger}.{plugin}")}})).await;
        }
        create(&triggers, json!({"metadata": {"name": trigger, "labels": {"kubewasm.test/hostile": inside}}})).await;
        for (plugin, _, _) in &plugins {
            let regarding = format!("{trigger}.{plugin}");
            eventually(&format!("{plugin}'s Event about {regarding}"), CONVERGE, || async {
                let events = events_from(&client, &inside, plugin).await;
                events.into_iter().find(|e| e.regarding.as_ref().and_then(|r| r.name.as_ref()) == Some(&regarding))
            })
            .await;
        }
    }

    let mut published = Vec::new();
    for (plugin, _, _) in &plugins {
        for ns in [outside.as_str(), host] {
            let events = events_from(&client, ns, plugin).await;
            published.extend(events.into_iter().map(|e| format!("{plugin} in {ns}: {:?}", e.note.unwrap_or_default())));
        }
    }
    let mut breaches = Breaches::default();
    breaches.check(published.is_empty(), || format!("Events published: {published:?}"));
    for (plugin, _, _) in &plugins {
        breaches.refused(&app, plugin, "events.publish", 1.0);
    }
    breaches.assert_none("Events outside the plugin's scope or in the host's namespace");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_leases_and_deployment_are_protected_from_a_plugin_granted_their_kinds() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("atk-lease").await;
    let host = host_namespace(&client).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), host);
    let deployment = create(
        &deployments,
        json!({"metadata": {"name": "kubewasm"}, "spec": {
        "selector": {"matchLabels": {"app": "kubewasm"}},
        "template": {"metadata": {"labels": {"app": "kubewasm"}},
                     "spec": {"containers": [{"name": "host", "image": "registry.invalid/kubewasm:0"}]}}}}),
    )
    .await;

    // A shard member Lease (a forged member stalls a sharded host) and the leader Lease, which
    // is protected today only when the host runs with --leader-elect; then the host's Deployment.
    let lease = |name: &str| {
        json!({"op": "apply", "kind": lease_kind(), "namespace": host, "name": name, "force": true,
               "body": {"spec": {"holderIdentity": "hostile", "leaseDurationSeconds": 3600}}})
    };
    let leases = ["kubewasm-shard-0000000000000001", "kubewasm"];
    let settings = json!({
        "owns": [config_map_kind()], "writes": [lease_kind(), deployment_kind()],
        "selector": format!("kubewasm.test/hostile={ns}"),
        "onSelected": [lease(leases[0]), lease(leases[1]),
            {"op": "merge-patch", "kind": deployment_kind(), "namespace": host, "name": "kubewasm",
             "body": {"spec": {"replicas": 0}}},
            marker("lease-done")],
    });
    let grants =
        "grants: {write: [Lease.coordination.k8s.io, Deployment.apps], dangerous: [Lease.coordination.k8s.io]}\n";
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&client);
    app.add_plugin(&hostile(dir.path(), "lease-forger", grants, settings)).await.unwrap();
    let triggers: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    create(&triggers, json!({"metadata": {"name": "trigger", "labels": {"kubewasm.test/hostile": ns}}})).await;
    written(&client, &ns, "lease-done").await;

    // Forged Leases are removed before asserting, so a failure leaves none behind.
    let lease_api: Api<Lease> = Api::namespaced(client.clone(), host);
    let mut forged = Vec::new();
    for name in leases {
        if lease_api.get_opt(name).await.unwrap().is_some() {
            lease_api.delete(name, &DeleteParams::default()).await.unwrap();
            forged.push(name);
        }
    }
    let mut breaches = Breaches::default();
    breaches.check(forged.is_empty(), || format!("Leases written in {host}: {forged:?}"));
    let after = deployments.get("kubewasm").await.unwrap();
    let replicas = after.spec.replicas;
    let unchanged = after.metadata.resource_version == deployment.metadata.resource_version;
    breaches.check(unchanged, || format!("Deployment {host}/kubewasm written: replicas {replicas:?}"));
    breaches.refused(&app, "lease-forger", "client.apply", 2.0);
    breaches.refused(&app, "lease-forger", "client.patch", 1.0);
    breaches.assert_none("writes to the host's Leases and Deployment");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_changes_only_objects_it_made_not_another_plugins_under_the_same_owner() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("atk-mine").await;

    // Both reconcile Namespaces (each its own selection) and own ConfigMaps: `a-child`, which
    // the first makes, is controlled by a Namespace the second reconciles too.
    let child = |name: &str, owner: &str, force: bool| {
        json!({"op": "apply", "kind": config_map_kind(), "namespace": "$trigger", "name": name, "controlled": true,
               "force": force, "body": {"data": {"owner": owner}}})
    };
    let on_a_child = |op: &str| {
        json!({"op": op, "kind": config_map_kind(), "namespace": "$trigger", "name": "a-child",
                                       "body": {"data": {"owner": "plugin-b"}}})
    };
    let plugins = [
        ("plugin-a", vec![child("a-child", "plugin-a", false)]),
        (
            "plugin-b",
            vec![
                child("a-child", "plugin-b", true),
                on_a_child("merge-patch"),
                on_a_child("delete"),
                child("b-child", "plugin-b", false),
            ],
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&client);
    for (name, calls) in &plugins {
        let settings = json!({"for": namespace_kind(), "owns": [config_map_kind()],
                              "selector": format!("kubewasm.test/{name}={ns}"), "onSelected": calls});
        app.add_plugin(&hostile(dir.path(), name, "", settings)).await.unwrap();
    }
    label(&client, &ns, json!({"kubewasm.test/plugin-a": ns})).await;
    written(&client, &ns, "a-child").await;
    label(&client, &ns, json!({"kubewasm.test/plugin-b": ns})).await;
    written(&client, &ns, "b-child").await;

    let mut breaches = Breaches::default();
    let a_child = Api::<ConfigMap>::namespaced(client.clone(), &ns).get_opt("a-child").await.unwrap();
    breaches.check(a_child.is_some(), || "a-child deleted".into());
    if let Some(a_child) = a_child {
        let data = a_child.data.clone().unwrap_or_default();
        let owner = data.get("owner").map(String::as_str);
        breaches.check(owner == Some("plugin-a"), || format!("a-child changed: {data:?}"));
        let labels = a_child.metadata.labels.clone().unwrap_or_default();
        let mark = labels.get("kubewasm.dev/plugin").map(String::as_str);
        breaches
            .check(mark == Some("plugin-a"), || format!("a-child not marked kubewasm.dev/plugin=plugin-a: {labels:?}"));
        let managers = managers(&a_child.metadata);
        breaches.check(!managers.contains(&"kubewasm/plugin-b".into()), || format!("a-child managers {managers:?}"));
    }
    for function in ["client.apply", "client.patch", "client.delete"] {
        breaches.refused(&app, "plugin-b", function, 1.0);
    }
    breaches.assert_none("another plugin's writes to a-child");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_deletes_its_child_after_the_owner_left_its_selection() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("atk-cleanup").await;

    // controller-runtime's pattern: a child while the owner is selected, none once it is not.
    let selector = format!("app=web,kubewasm.test/case={ns}");
    let settings = json!({"owns": [config_map_kind()], "selector": selector,
        "onSelected": [{"op": "apply", "kind": config_map_kind(), "namespace": "$trigger", "name": "web-child",
                        "controlled": true, "body": {"data": {"k": "v"}}}],
        "onUnselected": [{"op": "delete", "kind": config_map_kind(), "namespace": "$trigger", "name": "web-child"}]});
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&client);
    app.add_plugin(&hostile(dir.path(), "cleaner", "", settings)).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    create(&api, json!({"metadata": {"name": "web", "labels": {"app": "web", "kubewasm.test/case": ns}}})).await;
    written(&client, &ns, "web-child").await;

    let unselect = json!({"metadata": {"labels": {"app": null}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(&unselect)).await.unwrap();
    let outcome = eventually("web-child deleted, or its delete refused", CONVERGE, || async {
        if api.get_opt("web-child").await.unwrap().is_none() {
            return Some(Ok(()));
        }
        access_denied(&client, &ns, "cleaner").await.map(Err)
    })
    .await;
    assert_eq!(outcome, Ok(()), "the plugin's delete of its own child after its owner left the selection");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}
