//! The container image `make image` builds: its config and files are what the Dockerfile's final
//! stage says, its archive reads as an oci-archive and as a docker-archive under the name
//! deploy/base uses, and its own binary, run from the unpacked image as the examples overlay's
//! Deployment runs it (user, entrypoint + args, env, read-only root, volumes, service-account
//! mount, in-cluster config), makes the example plugins converge against a real API server
//! without a forbidden request: the deploy test's proof, with the image instead of the cargo-built
//! binary. The same again with the examples pulled from the harness registry (TLS with a CA
//! from a ConfigMap, a pull Secret), as a WasmPlugin and as plugin files naming an OCI module.
//! `make test` builds the image first; with `CI=true` a missing image fails.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use kubewasm_testenv::{ControlPlane, Registry};
use serde_json::{Value, json};

use common::audit::{audit_events, code, describe, examples_cluster};
use common::examples::{self, CONVERGE, deploy_dir};
use common::image::{FinalStage, Image, config_of, expected_tree, final_stage_text, repo_dir, rootfs_sh, tree, unpack};
use common::process::{ANY_PORT, HostProcess, service_account_token};
use common::{eventually, plugin_dir, registry, run_ok};

/// Mounts the volumes, then runs the image's command in the root file system as its user:
/// `$0` root, then `SOURCE MOUNT_POINT` pairs, `--`, uid, gid, working directory, command.
const POD_SH: &str = r#"set -e
root=$0
mount --bind "$root" "$root"
mkdir -p "$root/proc"
mount -o remount,bind,ro "$root"
# /proc, as every container runtime mounts it (the host compiles plugins by running /proc/self/exe).
mount -t proc proc "$root/proc"
while [ "$1" != -- ]; do mount --bind "$1" "$root$2"; shift 2; done
uid=$2 gid=$3 wd=$4; shift 4
unshare=$(command -v unshare)
export PATH="$IMAGE_PATH"; unset IMAGE_PATH
exec "$unshare" --root="$root" --wd="$wd" --setuid "$uid" --setgid "$gid" -- "$@""#;

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().map(|v| v.as_str().expect("a string").to_owned()).collect()
}

fn git_head() -> Option<String> {
    let out = Command::new("git").arg("-C").arg(repo_dir()).args(["rev-parse", "HEAD"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[test]
fn the_image_has_the_dockerfiles_final_stage_config_and_files_and_no_shell() {
    let Some(image) = Image::built(true) else { return };
    let stage = FinalStage::read();
    let config = image.config();
    let c = &config["config"];
    assert_eq!(c["User"], stage.user, "USER");
    assert_eq!(stage.user, "65532:65532", "the non-root user of distroless");
    assert_eq!(strings(&c["Entrypoint"]), stage.entrypoint, "ENTRYPOINT");
    assert_eq!(stage.entrypoint, ["/usr/local/bin/kubewasm", "run"]);
    assert!(c.get("Cmd").is_none_or(Value::is_null), "no CMD: the Deployment's args are the flags");
    assert_eq!(strings(&c["Env"]), stage.env, "ENV");
    assert_eq!(c["WorkingDir"], stage.workdir, "WORKDIR");
    let exposed: Vec<String> = c["ExposedPorts"].as_object().unwrap().keys().cloned().collect();
    assert_eq!(exposed, stage.exposed, "EXPOSE");
    // `docker build` without --build-arg labels the workspace's version; make image its commit.
    assert_eq!(stage.args["VERSION"], env!("CARGO_PKG_VERSION"), "the Dockerfile's default VERSION");
    let revision = git_head().unwrap_or_else(|| "unknown".to_owned());
    let labels: BTreeMap<String, String> = stage
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.replace("${VERSION}", env!("CARGO_PKG_VERSION")).replace("${REVISION}", &revision)))
        .collect();
    let actual: BTreeMap<String, String> =
        serde_json::from_value(c["Labels"].clone()).expect("labels are a string map");
    assert_eq!(actual, labels, "LABEL (revision: git HEAD; rebuild with `make image` after a commit)");
    for key in ["source", "version", "revision"] {
        assert!(labels.contains_key(&format!("org.opencontainers.image.{key}")), "the OCI label {key}");
    }

    // The files: deploy/image/rootfs.sh's output (with the image's binary, the built example
    // plugins and this machine's CA bundle) placed by the final stage's COPYs, as docker would.
    let unpacked = image.unpack();
    let rootfs = unpacked.path().join("bundle/rootfs");
    let built = tempfile::tempdir().unwrap();
    rootfs_sh(&built.path().join("image"), &rootfs.join("usr/local/bin/kubewasm"));
    let expected = expected_tree(&stage, &built.path().join("image"));
    let mut files = BTreeMap::new();
    tree(&rootfs, "/", None, &mut files);
    let list =
        |t: &BTreeMap<String, common::image::Entry>| t.iter().map(|(p, e)| format!("{p} {e:?}")).collect::<Vec<_>>();
    assert_eq!(list(&files), list(&expected), "the image's files and the Dockerfile's");
    for path in ["/bin/sh", "/bin", "/usr/bin", "/lib"] {
        assert!(!files.contains_key(path), "{path} in the image: no shell, no libraries");
    }
    let tmp = std::fs::metadata(rootfs.join("tmp")).unwrap();
    assert_eq!(tmp.permissions().mode() & 0o7777, 0o1777, "/tmp writable by every user, sticky");
    let cache = std::fs::metadata(rootfs.join("var/cache/kubewasm")).unwrap();
    assert_eq!((cache.uid(), cache.gid()), (65532, 65532), "the compile cache belongs to the image's user");
    let plugin = std::fs::read(rootfs.join("opt/kubewasm/plugins/namespace-defaults.wasm")).unwrap();
    assert_eq!(plugin, std::fs::read(plugin_dir().join("namespace_defaults.wasm")).unwrap(), "the built plugin");
    // The engines, where the image's binary finds them unasked: it loads a plugin given as source.
    let engines = rootfs.join("usr/local/lib/kubewasm/engines");
    for built in std::fs::read_dir(common::project::engine_dir()).unwrap().flatten().map(|e| e.path()) {
        if built.extension().is_some_and(|e| e == "wasm") {
            let shipped = std::fs::read(engines.join(built.file_name().unwrap())).unwrap_or_default();
            assert!(shipped == std::fs::read(&built).unwrap(), "{} in the image", built.display());
        }
    }
    let work = tempfile::tempdir().unwrap();
    let text = common::plugin_source("python/namespace-defaults/namespace_defaults.py");
    let source = common::install_source(work.path(), "defaults", "namespace_defaults_py.wasm", &text, "");
    let mut check = Command::new(rootfs.join("usr/local/bin/kubewasm"));
    check.arg("check").arg(&source).env_remove("KUBEWASM_ENGINE_DIR");
    check.env("KUBEWASM_COMPILE_CACHE", work.path().join("compile-cache"));
    let checked = run_ok(check);
    assert!(checked.contains("reconciles:     v1 Namespace"), "{checked}");
    // Its engine precompiled by the tests' binary: the image's static binary maps it and writes
    // nothing into its empty compile cache, as a new pod's start compiles no engine.
    let shipped = std::fs::read_dir(engines.join("compiled")).unwrap().flatten();
    assert!(shipped.filter(|e| e.path().extension().is_some_and(|x| x == "cwasm")).count() >= 2, "precompiled engines");
    let written = std::fs::read_dir(work.path().join("compile-cache/compiled")).unwrap().flatten();
    let written: Vec<_> = written.map(|e| e.file_name()).collect();
    assert!(written.is_empty(), "the image's binary compiled its engine: {written:?}");

    // The binary ships stripped of its line tables, with its symbols; the line tables are kept
    // apart beside the image's files (what `make release` archives).
    let sections = |file: &Path| {
        let mut readelf = std::process::Command::new("readelf");
        readelf.args(["-S", "--wide"]).arg(file);
        run_ok(readelf)
    };
    let shipped = sections(&rootfs.join("usr/local/bin/kubewasm"));
    assert!(!shipped.contains(".debug_line") && shipped.contains(".symtab"), "{shipped}");
    let apart = sections(&image.layout.parent().unwrap().join("kubewasm.debug"));
    assert!(apart.contains(".debug_line"), "the line tables kept apart: {apart}");
}

/// `buildah bud` of the Dockerfile's final stage, its builder stage standing in as a local
/// image that holds what the real one makes (deploy/image/rootfs.sh's output, from the same
/// inputs), gives the files and config `make image` gave: the two builds agree, checked with a
/// Dockerfile implementation rather than this file's reading of one.
#[test]
fn buildah_builds_the_dockerfiles_final_stage_into_the_same_files_and_config() {
    let Some(image) = Image::built(true) else { return };
    let made = image.unpack();
    let rootfs = made.path().join("bundle/rootfs");
    let work = tempfile::tempdir().unwrap();
    let context = work.path().join("context");
    rootfs_sh(&context.join("image"), &rootfs.join("usr/local/bin/kubewasm"));
    let buildah = |args: &[&str]| {
        let mut command = Command::new("buildah");
        command.arg("--root").arg(work.path().join("storage")).arg("--runroot").arg(work.path().join("run"));
        command.args(["--storage-driver", "vfs"]).args(args);
        run_ok(command).trim().to_owned()
    };
    let builder = buildah(&["from", "scratch"]);
    buildah(&["copy", &builder, &context.join("image").display().to_string(), "/image"]);
    buildah(&["commit", "-q", &builder, "localhost/kubewasm-builder"]);
    let dockerfile = work.path().join("Dockerfile");
    std::fs::write(&dockerfile, format!("FROM localhost/kubewasm-builder AS builder\n{}", final_stage_text())).unwrap();
    let config = image.config();
    let revision = config["config"]["Labels"]["org.opencontainers.image.revision"].as_str().unwrap();
    let layout = work.path().join("oci");
    let (dockerfile, context) = (dockerfile.display().to_string(), context.display().to_string());
    let revision = format!("REVISION={revision}");
    buildah(&[
        "bud",
        "-q",
        "--isolation",
        "chroot",
        "--build-arg",
        &revision,
        "-f",
        &dockerfile,
        "-t",
        "final",
        &context,
    ]);
    buildah(&["push", "-q", "final", &format!("oci:{}:final", layout.display())]);

    let built = unpack(&layout, "final");
    let (mut theirs, mut ours) = (BTreeMap::new(), BTreeMap::new());
    tree(&built.path().join("bundle/rootfs"), "/", None, &mut theirs);
    tree(&rootfs, "/", None, &mut ours);
    let list =
        |t: &BTreeMap<String, common::image::Entry>| t.iter().map(|(p, e)| format!("{p} {e:?}")).collect::<Vec<_>>();
    assert_eq!(list(&theirs), list(&ours), "buildah's files and make image's");
    let mut theirs = config_of(&layout, "final");
    theirs["config"]["Labels"].as_object_mut().unwrap().remove("io.buildah.version");
    assert_eq!(theirs["config"], config["config"], "buildah's config and make image's");
}

#[test]
fn the_archive_reads_as_oci_and_docker_archive_under_the_name_deploy_base_uses() {
    let Some(image) = Image::built(false) else { return };
    let name = format!("kubewasm:{}", image.tag);
    let deployment: Value =
        serde_yaml::from_str(&std::fs::read_to_string(deploy_dir().join("base/deployment.yaml")).unwrap()).unwrap();
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], name, "deploy/base's image");

    let archive = image.archive.display().to_string();
    let inspect = |transport: &str| {
        let mut skopeo = Command::new("skopeo");
        skopeo.args(["inspect", "--config", &format!("{transport}:{archive}")]);
        serde_json::from_str::<Value>(&run_ok(skopeo)).expect("skopeo prints the config as JSON")
    };
    assert_eq!(inspect("oci-archive"), image.config(), "the oci-archive holds the layout's image");
    let docker = inspect("docker-archive");
    for field in ["User", "Entrypoint", "Env", "Labels", "WorkingDir"] {
        assert_eq!(docker["config"][field], image.config()["config"][field], "docker-archive {field}");
    }
    let member = |file: &str| {
        let mut tar = Command::new("tar");
        tar.arg("-xOf").arg(&image.archive).arg(format!("./{file}"));
        serde_json::from_str::<Value>(&run_ok(tar)).unwrap()
    };
    let index = member("index.json");
    assert_eq!(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], name, "podman's name");
    assert_eq!(
        index["manifests"][0]["annotations"]["io.containerd.image.name"],
        format!("docker.io/library/{name}"),
        "containerd's (docker load with the containerd store)"
    );
    assert_eq!(member("manifest.json")[0]["RepoTags"], serde_json::json!([name]), "docker load's name");
}

/// `kubectl kustomize <dir>`: the objects an apply of it creates.
fn rendered(cp: &ControlPlane, dir: &str) -> Vec<Value> {
    let mut kustomize = cp.kubectl();
    kustomize.arg("kustomize").arg(deploy_dir().join(dir));
    let yaml = run_ok(kustomize);
    serde_yaml::Deserializer::from_str(&yaml).map(|doc| serde::Deserialize::deserialize(doc).unwrap()).collect()
}

fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered overlay"))
}

/// What the kubelet and the container runtime would do with the overlay's Deployment and this
/// image: each volume of the container (emptyDir, ConfigMap, with subPath) and the service
/// account's token, CA and namespace mounted into a read-only `rootfs`; the image's user,
/// working directory and entrypoint with the container's args; the image's env, then the
/// container's, then what the kubelet adds. `volumes` holds the volumes' contents. Two changes:
/// the admin server listens on `admin_addr` (a pod has its own network), and logs are warnings.
fn pod_command(
    rootfs: &Path,
    image: &Value,
    objects: &[Value],
    volumes: &Path,
    api_port: u16,
    admin_addr: &str,
) -> Command {
    let deployment = object(objects, "Deployment", "kubewasm");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let user = image["config"]["User"].as_str().unwrap();
    let (uid, gid) = user.split_once(':').unwrap();
    assert_eq!(pod["securityContext"]["runAsUser"].to_string(), uid, "the pod runs as the image's user");
    assert_eq!(pod["securityContext"]["runAsGroup"].to_string(), gid, "and group");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true, "the root file system is read-only");
    assert!(container["command"].is_null(), "the container runs the image's entrypoint");

    let mut mounts = vec![(volumes.join("serviceaccount"), "/var/run/secrets/kubernetes.io/serviceaccount".to_owned())];
    for mount in container["volumeMounts"].as_array().unwrap() {
        let name = mount["name"].as_str().unwrap();
        let dir = volumes.join(name);
        let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == name).unwrap();
        if !dir.exists() {
            std::fs::create_dir(&dir).unwrap();
            if volume.get("emptyDir").is_some() {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
            } else if let Some(cm) = volume["configMap"]["name"].as_str() {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
                for (key, data) in object(objects, "ConfigMap", cm)["data"].as_object().unwrap() {
                    std::fs::write(dir.join(key), data.as_str().unwrap()).unwrap();
                }
            } else {
                panic!("volume {volume}: only emptyDir and configMap volumes are emulated");
            }
        }
        let source = mount["subPath"].as_str().map_or(dir.clone(), |sub| dir.join(sub));
        mounts.push((source, mount["mountPath"].as_str().unwrap().to_owned()));
    }
    let mut command = Command::new("unshare");
    command.args(["--mount", "--propagation", "private", "sh", "-c", POD_SH]).arg(rootfs);
    for (source, target) in &mounts {
        // The runtime creates mount points in the container's root before it is made read-only.
        let point = rootfs.join(target.trim_start_matches('/'));
        if source.is_dir() {
            std::fs::create_dir_all(&point).unwrap();
        } else {
            std::fs::create_dir_all(point.parent().unwrap()).unwrap();
            std::fs::write(&point, "").unwrap();
        }
        command.arg(source).arg(target);
    }
    command.args(["--", uid, gid, image["config"]["WorkingDir"].as_str().unwrap()]);
    command.args(strings(&image["config"]["Entrypoint"])).args(strings(&container["args"]));

    command.env_clear().env("IMAGE_PATH", "").env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for pair in strings(&image["config"]["Env"]) {
        let (key, value) = pair.split_once('=').unwrap();
        command.env(if key == "PATH" { "IMAGE_PATH" } else { key }, value);
    }
    for var in container["env"].as_array().unwrap() {
        let value = match (&var["value"], var.pointer("/valueFrom/fieldRef/fieldPath")) {
            (Value::String(v), _) => v.clone(),
            (_, Some(path)) if path == "metadata.namespace" => {
                deployment["metadata"]["namespace"].as_str().unwrap().into()
            }
            _ => panic!("env {var}: only values and the namespace field are emulated"),
        };
        command.env(var["name"].as_str().unwrap(), value);
    }
    command.env("HOME", "/home/nonroot").env("KUBERNETES_SERVICE_HOST", "127.0.0.1");
    command.env("KUBERNETES_SERVICE_PORT", api_port.to_string());
    command.env("KUBEWASM_ADMIN_ADDR", admin_addr).env("KUBEWASM_LOG", "warn").stdout(Stdio::null());
    command
}

/// Where the registry variant mounts the registry's CA.
const CA_DIR: &str = "/etc/kubewasm/registry-ca";

/// The examples overlay as an operator changes it to pull the examples rather than run the
/// image's copies: namespace-defaults a WasmPlugin, the other two plugin files naming their OCI
/// module, in a ConfigMap mounted at the base's plugin directory; the registry's CA a ConfigMap
/// mounted where `KUBEWASM_OCI_CA_FILE` says; the pull Secret in the host's namespace. Returns
/// the digest namespace-defaults was pushed as.
async fn pull_the_examples(admin: &kube::Client, registry: &Registry, objects: &mut Vec<Value>, work: &Path) -> String {
    let digest = registry::example_wasm_plugin(admin, registry, "namespace-defaults", &work.join("ca.pem")).await;
    let mut files = serde_json::Map::new();
    for name in ["config-reloader", "configmap-sync"] {
        let (reference, _) = registry::push_example(registry, name).await;
        let config = serde_yaml::to_string(&registry::example_config_pulling(name, &reference)).unwrap();
        files.insert(format!("{name}.yaml"), config.into());
    }
    let config_map = |name: &str, data: serde_json::Map<String, Value>| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "kubewasm-system"}, "data": data})
    };
    objects.push(config_map("kubewasm-registry-plugins", files));
    let ca = serde_json::Map::from_iter([("ca.pem".to_owned(), Value::from(registry.ca_pem()))]);
    objects.push(config_map("kubewasm-registry-ca", ca));

    let deployment = objects.iter_mut().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &mut deployment["spec"]["template"]["spec"];
    let volumes = pod["volumes"].as_array_mut().unwrap();
    volumes.retain(|v| v["name"] != "example-configs" && v["name"] != "plugins");
    volumes.push(json!({"name": "plugins", "configMap": {"name": "kubewasm-registry-plugins"}}));
    volumes.push(json!({"name": "registry-ca", "configMap": {"name": "kubewasm-registry-ca"}}));
    let container = &mut pod["containers"][0];
    let mounts = container["volumeMounts"].as_array_mut().unwrap();
    mounts.retain(|m| m["name"] != "example-configs");
    mounts.push(json!({"name": "registry-ca", "mountPath": CA_DIR, "readOnly": true}));
    let env = container["env"].as_array_mut().unwrap();
    env.retain(|e| e["name"] != "KUBEWASM_PLUGINS");
    env.push(json!({"name": "KUBEWASM_PLUGINS", "value": "/etc/kubewasm/plugins"}));
    env.push(json!({"name": "KUBEWASM_OCI_CA_FILE", "value": format!("{CA_DIR}/ca.pem")}));
    digest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_images_binary_runs_the_examples_overlay_from_its_read_only_root_as_65532_without_a_forbidden_request() {
    run_the_examples_overlay(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_images_binary_pulls_the_examples_from_a_registry_over_tls_with_a_pull_secret_and_converges_as_65532() {
    run_the_examples_overlay(true).await;
}

/// The image's binary, run as the examples overlay's pod, makes the examples converge without
/// a forbidden request, writing its caches as the image's user. `from_registry`: with the
/// overlay changed by [`pull_the_examples`].
async fn run_the_examples_overlay(from_registry: bool) {
    let Some(image) = Image::built(true) else { return };
    let registry = if from_registry {
        let Some(registry) = Registry::start_or_skip().await else { return };
        Some(registry)
    } else {
        None
    };
    let work = tempfile::tempdir().unwrap();
    let (cp, log) = examples_cluster(work.path()).await;
    let admin = cp.admin_client().await;
    let mut objects = rendered(&cp, "overlays/examples");
    let pushed = match &registry {
        Some(registry) => Some(pull_the_examples(&admin, registry, &mut objects, work.path()).await),
        None => None,
    };

    // What the kubelet mounts for the Deployment's ServiceAccount: token, CA bundle, namespace.
    let deployment = object(&objects, "Deployment", "kubewasm");
    let namespace = deployment["metadata"]["namespace"].as_str().unwrap();
    let account = deployment["spec"]["template"]["spec"]["serviceAccountName"].as_str().unwrap();
    let volumes = work.path().join("volumes");
    let sa = volumes.join("serviceaccount");
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::set_permissions(&volumes, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(sa.join("token"), service_account_token(&admin, namespace, account).await).unwrap();
    std::fs::copy(cp.dir().join("ca.crt"), sa.join("ca.crt")).unwrap();
    std::fs::write(sa.join("namespace"), namespace).unwrap();
    for file in ["token", "ca.crt", "namespace"] {
        std::fs::set_permissions(sa.join(file), std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    let unpacked = image.unpack();
    let rootfs = unpacked.path().join("bundle/rootfs");
    let port = cp.admin_config().cluster_url.port_u16().expect("the apiserver URL has a port");
    let command = pod_command(&rootfs, &image.config(), &objects, &volumes, port, ANY_PORT);
    let mut host = HostProcess::spawn(command);
    host.ready(CONVERGE).await;
    eventually("the host leads", CONVERGE, || async {
        host.metric("leader_election_master_status", &[("name", "kubewasm")]).filter(|v| *v == 1.0)
    })
    .await;
    let id = format!("{}-img{}", std::process::id(), if from_registry { "-oci" } else { "" });
    examples::all_converge(&admin, &id).await;
    if let Some(digest) = &pushed {
        eventually("the WasmPlugin namespace-defaults Ready from the registry", CONVERGE, || {
            registry::serves_digest(&admin, "namespace-defaults", digest)
        })
        .await;
    }
    if from_registry {
        // The pulled modules' manifests are kept beside the compile cache once each is pulled;
        // a module can serve before its manifest is on disk, so the host is stopped only once
        // all three are (the cold CI run at 2a91dfc stopped it with two written).
        let manifests = volumes.join("compile-cache").join("oci").join("manifests");
        eventually("the three pulled manifests kept", CONVERGE, || async {
            let kept = std::fs::read_dir(&manifests).map(|d| d.count()).unwrap_or(0);
            (kept == 3).then_some(())
        })
        .await;
    }
    host.signal("-TERM");
    let status = host.exited(Duration::from_secs(60)).await;
    assert!(status.success(), "kubewasm exited with {status}");

    let events = audit_events(&log);
    assert!(events.iter().any(|e| e["verb"] == "patch"), "the audit log has the host's writes");
    let forbidden: Vec<String> = events.iter().filter(|e| code(e) == Some(403)).map(describe).collect();
    assert!(forbidden.is_empty(), "forbidden requests by the image's ServiceAccount:\n{}", forbidden.join("\n"));
    // The compiled plugins, written by the image's user into the compile-cache volume.
    let mut cache = BTreeMap::new();
    tree(&volumes.join("compile-cache"), "/", None, &mut cache);
    assert!(
        cache.values().any(|e| e.is_file_of(65532)),
        "no file of uid 65532 in the compile cache: {:?}",
        cache.keys().collect::<Vec<_>>()
    );
    if from_registry {
        // The three pulled modules' manifests (their layers beside them), kept by digest beside
        // the compile cache (`--oci-cache`'s default) by the image's user.
        let manifests: Vec<&String> = cache
            .iter()
            .filter(|(path, e)| path.starts_with("/oci/manifests/") && e.is_file_of(65532))
            .map(|(p, _)| p)
            .collect();
        assert_eq!(
            manifests.len(),
            3,
            "the OCI cache's manifests of uid 65532: {:?}",
            cache.keys().collect::<Vec<_>>()
        );
    }
}
