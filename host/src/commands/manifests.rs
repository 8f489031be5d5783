//! `kubewasm manifests`: the host's deployment (deploy/base, with the WasmPlugin CRD) as YAML, so a cluster needs the binary, not the checkout.

use clap::Args;
use serde::Deserialize as _;
use serde_yaml::Value;

/// deploy/base's files, in its kustomization's order (the CRD is `kubewasm crd`'s).
const BASE: [&str; 6] = [
    include_str!("../../../deploy/base/namespace.yaml"),
    include_str!("../../../deploy/base/rbac.yaml"),
    include_str!("../../../deploy/base/plugin-mark-policy.yaml"),
    include_str!("../../../deploy/base/plugin-dangerous-kinds-policy.yaml"),
    include_str!("../../../deploy/base/deployment.yaml"),
    include_str!("../../../deploy/base/service.yaml"),
];

/// The label deploy/base's kustomization puts on every object.
const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "kubewasm");

/// `kubewasm manifests`.
#[derive(Debug, Args)]
pub struct ManifestsArgs {
    /// The host's image (default: deploy/base's `kubewasm:<version>`, what `make image` loads).
    #[arg(long, env = "KUBEWASM_IMAGE")]
    pub image: Option<String>,
}

impl ManifestsArgs {
    /// Prints the manifests: `kubewasm manifests | kubectl apply --server-side -f -`.
    pub fn execute(self) -> anyhow::Result<()> {
        print!("{}", manifests(self.image.as_deref())?);
        Ok(())
    }
}

/// deploy/base as `kubectl kustomize deploy/base` renders it (the objects, labelled), with the
/// host container's image replaced by `image` if given. Hand-written rather than a kustomize
/// library: the base only adds one label, and no maintained Rust crate renders kustomizations.
pub fn manifests(image: Option<&str>) -> anyhow::Result<String> {
    let crd = kubewasm_host::hotload::crd_yaml();
    let mut out =
        String::from("# kubewasm's host: deploy/base of the kubewasm repository, printed by `kubewasm manifests`.\n");
    for text in std::iter::once(crd.as_str()).chain(BASE) {
        for document in serde_yaml::Deserializer::from_str(text) {
            let mut object = Value::deserialize(document)?;
            if object.is_null() {
                continue;
            }
            let labels = &mut object["metadata"]["labels"];
            if labels.is_null() {
                *labels = Value::Mapping(Default::default());
            }
            labels[PART_OF.0] = PART_OF.1.into();
            if let (Some(image), Some("Deployment")) = (image, object["kind"].as_str()) {
                for container in
                    object["spec"]["template"]["spec"]["containers"].as_sequence_mut().into_iter().flatten()
                {
                    container["image"] = image.into();
                }
            }
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(&object)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifests_hold_the_crd_and_every_base_object_labelled_with_the_image_asked_for() {
        let text = manifests(Some("registry.example/kubewasm:9")).unwrap();
        let objects: Vec<Value> =
            serde_yaml::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).collect();
        let kinds: Vec<_> = objects.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds[0], "CustomResourceDefinition");
        for kind in ["Namespace", "ServiceAccount", "ClusterRole", "ValidatingAdmissionPolicy", "Deployment", "Service"]
        {
            assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
        }
        assert!(objects.iter().all(|o| o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kubewasm"));
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], "registry.example/kubewasm:9");
    }
}
