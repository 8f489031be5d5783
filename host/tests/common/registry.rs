//! The harness registry as a host's tests use it: its credentials, a dockerconfigjson pull
//! Secret, and the example plugins pushed to it with configs naming them as OCI modules.

use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kubewasm_host::hotload::WasmPlugin;
use kubewasm_host::hotload::oci::push::Artifact;
use kubewasm_host::hotload::oci::{Options, Puller};
use kubewasm_testenv::{REGISTRY_PASSWORD, REGISTRY_USER, Registry};
use oci_client::secrets::RegistryAuth;
use serde_json::{Value, json};

use super::examples;

/// The name of the pull Secret [`pull_secret`] makes for the examples.
pub const PULL_SECRET: &str = "regcred";

/// The harness registry's user and password, as a push or pull authenticates.
pub fn auth() -> RegistryAuth {
    RegistryAuth::Basic(REGISTRY_USER.into(), REGISTRY_PASSWORD.into())
}

/// Applies a dockerconfigjson Secret `name` in `ns` with the harness user and `password` for
/// `registry` (a `host:port`).
pub async fn pull_secret(client: &kube::Client, ns: &str, name: &str, registry: &str, password: &str) {
    let config = json!({"auths": {registry: {"username": REGISTRY_USER, "password": password}}});
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config.to_string()},
    });
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    api.patch(name, &PatchParams::apply("kubewasm-test").force(), &Patch::Apply(&secret)).await.unwrap();
}

/// A puller (it pushes too) trusting the registry's CA.
pub fn puller(registry: &Registry) -> Puller {
    Puller::new(&Options { ca_pem: Some(registry.ca_pem().as_bytes().to_vec()), ..Default::default() })
}

/// Pushes example plugin `name`'s component (`make plugins`' build) to
/// `<registry>/examples/<name>:v1`; returns the reference and the manifest digest.
pub async fn push_example(registry: &Registry, name: &str) -> (String, String) {
    let reference = format!("{}/examples/{name}:v1", registry.host());
    let wasm = super::plugin_wasm(&format!("{}.wasm", name.replace('-', "_")));
    let digest = puller(registry).push(&reference, &Artifact::wasm(&wasm), &auth()).await.unwrap();
    (reference, digest)
}

/// Example `name`'s operator config (deploy/overlays/examples/plugins) with `module` naming
/// `reference`, pulled with [`PULL_SECRET`]: a WasmPlugin's spec, or a plugin file's config.
pub fn example_config_pulling(name: &str, reference: &str) -> Value {
    let mut config: Value = serde_yaml::from_str(&examples::example_config(name)).unwrap();
    config["module"] = json!({"oci": {"ref": reference, "pullSecret": PULL_SECRET}});
    config
}

/// Pushes example `name` and serves it as a cluster-wide WasmPlugin of the same name pulled with
/// a pull Secret in the host's namespace (`kubewasm-system`); writes the registry's CA to `ca`
/// for the host's `--oci-ca-file`. Returns the manifest digest pushed.
pub async fn example_wasm_plugin(admin: &kube::Client, registry: &Registry, name: &str, ca: &Path) -> String {
    std::fs::write(ca, registry.ca_pem()).unwrap();
    pull_secret(admin, "kubewasm-system", PULL_SECRET, &registry.host(), REGISTRY_PASSWORD).await;
    let (reference, digest) = push_example(registry, name).await;
    examples::install_wasm_plugin_crd(admin).await;
    let body = json!({
        "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": name}, "spec": example_config_pulling(name, &reference),
    });
    let apply = PatchParams::apply("kubewasm-test").force();
    Api::<WasmPlugin>::all(admin.clone()).patch(name, &apply, &Patch::Apply(&body)).await.unwrap();
    digest
}

/// Whether WasmPlugin `name` is Ready serving the module at `digest`.
pub async fn serves_digest(admin: &kube::Client, name: &str, digest: &str) -> Option<()> {
    let status = Api::<WasmPlugin>::all(admin.clone()).get(name).await.ok()?.status?;
    let ready = status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True");
    (ready && status.oci.as_ref().is_some_and(|o| o.digest == digest)).then_some(())
}
