//! Starts a local control plane (etcd + kube-apiserver, the same as the tests use) for the
//! demo, copies its admin kubeconfig to the path given (default `.kubewasm/kubeconfig`), and
//! runs until SIGINT/SIGTERM. If it is killed outright, the harness's watchdogs still stop etcd
//! and kube-apiserver.

use std::path::PathBuf;

const USAGE: &str = "\
usage: kubewasm-control-plane [KUBECONFIG]

Starts etcd and kube-apiserver (the binaries `make control-plane` builds, found as the tests find
them: $KUBEBUILDER_ASSETS, else ~/.cache/kubewasm/k8s/<version>), writes an admin kubeconfig to
KUBECONFIG (default .kubewasm/kubeconfig) and runs until Ctrl-C or SIGTERM, which stop both and
remove the kubeconfig.

  kubectl --kubeconfig .kubewasm/kubeconfig get namespaces
";

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = match (args.next(), args.next()) {
        (Some(a), _) if a == "-h" || a == "--help" => {
            print!("{USAGE}");
            return Ok(());
        }
        (Some(a), _) if a.starts_with('-') => anyhow::bail!("unknown option `{a}`\n\n{USAGE}"),
        (_, Some(extra)) => anyhow::bail!("unexpected argument `{extra}`\n\n{USAGE}"),
        (path, None) => path.map_or_else(|| PathBuf::from(".kubewasm/kubeconfig"), PathBuf::from),
    };
    let cp = kubewasm_testenv::ControlPlane::builder().start()?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = out.with_extension("partial");
    std::fs::copy(cp.kubeconfig_path(), &tmp)?;
    std::fs::rename(&tmp, &out)?;
    eprintln!(
        "kubewasm-control-plane: ready in {:?}; kubeconfig {}; logs in {}",
        cp.apiserver_startup_time(),
        out.display(),
        cp.dir().display()
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        anyhow::Ok(())
    })?;
    let _ = std::fs::remove_file(&out);
    drop(cp);
    Ok(())
}
