//! `kubewasm dev`: a local control plane and the host on a plugin directory, stopped by Ctrl-C.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::Api;
use kube::api::PostParams;

/// Start-up of etcd + kube-apiserver (the harness allows 60 s) plus loading the plugin.
const START: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_runs_a_directory_of_plugins_on_a_local_control_plane_until_sigint_stops_everything() {
    let work = tempfile::tempdir().unwrap();
    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    common::install_plugin(&plugins, "namespace-defaults", "namespace_defaults.wasm", "");
    let kubeconfig = work.path().join("kube/config");
    let stdout = std::fs::File::create(work.path().join("stdout")).unwrap();
    let stderr = std::fs::File::create(work.path().join("stderr")).unwrap();
    let mut dev = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .arg("dev")
        .arg("--plugins")
        .arg(&plugins)
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .args(["--admin-addr", "127.0.0.1:0", "--wasm-plugins=false", "--compile-cache"])
        .arg(common::test_compile_cache())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap();
    let logs = || {
        let read = |f: &str| std::fs::read_to_string(work.path().join(f)).unwrap_or_default();
        format!("stdout:\n{}\nstderr:\n{}", read("stdout"), read("stderr"))
    };

    let started = Instant::now();
    while !kubeconfig.exists() {
        assert!(dev.try_wait().unwrap().is_none(), "kubewasm dev exited: {}", logs());
        assert!(started.elapsed() < START, "no kubeconfig after {START:?}: {}", logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let namespace: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "dev-demo"}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "dev-demo");
    common::eventually("the plugin reconciled dev-demo", START, || async {
        quotas.get_opt("default-quota").await.ok().flatten()
    })
    .await;
    assert!(logs().contains(&format!("kubectl --kubeconfig {}", kubeconfig.display())), "{}", logs());

    let pid = dev.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let stopping = Instant::now();
    let status = loop {
        if let Some(status) = dev.try_wait().unwrap() {
            break status;
        }
        assert!(stopping.elapsed() < Duration::from_secs(90), "still running after SIGINT: {}", logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "{status}: {}", logs());
    assert!(!kubeconfig.exists(), "the kubeconfig is removed");
    assert!(Api::<Namespace>::all(client).list(&Default::default()).await.is_err(), "the apiserver is gone");
}
