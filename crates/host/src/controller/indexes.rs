//! Index functions built into the host that plugins name in `index-source.builtin`.

use serde_json::Value;

use crate::informer::IndexFunc;
use crate::plugin::registration::IndexSource;

/// The index function for a registration's index source.
pub fn index_func(source: &IndexSource) -> Option<IndexFunc> {
    match source {
        IndexSource::Field(path) => Some(IndexFunc::field_path(path)),
        IndexSource::Builtin(name) => match name.as_str() {
            "pod-template-configmaps" => Some(IndexFunc::json(pod_template_configmaps)),
            _ => None,
        },
    }
}

/// `namespace/name` of every ConfigMap an object's pod template references through volumes
/// (plain and projected), `env[].valueFrom.configMapKeyRef` and `envFrom[].configMapRef`.
pub fn pod_template_configmaps(object: &Value) -> Vec<String> {
    let namespace = object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let Some(pod) = object.pointer("/spec/template/spec") else { return Vec::new() };
    fn items(v: Option<&Value>) -> Vec<&Value> {
        v.and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default()
    }
    let mut names = Vec::new();
    for volume in items(pod.get("volumes")) {
        names.extend(volume.pointer("/configMap/name").and_then(Value::as_str));
        for source in items(volume.pointer("/projected/sources")) {
            names.extend(source.pointer("/configMap/name").and_then(Value::as_str));
        }
    }
    for container in items(pod.get("containers")).into_iter().chain(items(pod.get("initContainers"))) {
        for env in items(container.get("env")) {
            names.extend(env.pointer("/valueFrom/configMapKeyRef/name").and_then(Value::as_str));
        }
        for from in items(container.get("envFrom")) {
            names.extend(from.pointer("/configMapRef/name").and_then(Value::as_str));
        }
    }
    let mut keys: Vec<String> =
        names.into_iter().map(|n| crate::informer::object::object_key(Some(namespace), n)).collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_template_configmaps_finds_volumes_projections_env_and_env_from() {
        let deployment = json!({"metadata": {"namespace": "web"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "a", "configMap": {"name": "app-config"}},
                        {"name": "b", "projected": {"sources": [{"configMap": {"name": "extra"}}, {"secret": {"name": "s"}}]}},
                        {"name": "c", "emptyDir": {}}],
            "containers": [{"name": "app",
                "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "env-config", "key": "x"}}}, {"name": "Y", "value": "1"}],
                "envFrom": [{"configMapRef": {"name": "bulk"}}, {"secretRef": {"name": "s2"}}]}],
            "initContainers": [{"name": "init", "envFrom": [{"configMapRef": {"name": "app-config"}}]}]}}}});
        assert_eq!(
            pod_template_configmaps(&deployment),
            vec!["web/app-config", "web/bulk", "web/env-config", "web/extra"]
        );
        assert!(pod_template_configmaps(&json!({"metadata": {"name": "x"}})).is_empty());
    }
}
