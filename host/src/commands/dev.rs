//! `kubewasm dev`: a local control plane (the test harness's etcd + kube-apiserver, and with
//! `--with-gc` kube-controller-manager's garbage collector) and the host on a plugin directory
//! with hot reload, until Ctrl-C stops everything.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use kubewasm_host::shutdown;

use clap::Args;
use kubewasm_host::plugin::Compiler;

use super::run::{RunArgs, serve};

/// `kubewasm dev`: `run`'s flags, on a control plane of its own.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Also run kube-controller-manager's garbage collector (and namespace controller), so
    /// objects owned by a deleted object are deleted and deleted namespaces go away.
    #[arg(long, env = "KUBEWASM_DEV_WITH_GC")]
    pub with_gc: bool,
    /// Start the control plane only, not the host: to deploy the host yourself, e.g. as its
    /// ServiceAccount with `kubewasm manifests` (the book's "Running as the host's
    /// ServiceAccount locally"). The host's flags are ignored.
    #[arg(long, env = "KUBEWASM_DEV_CONTROL_PLANE_ONLY")]
    pub control_plane_only: bool,
    /// Where to write the admin kubeconfig of the control plane (removed on exit).
    #[arg(long, env = "KUBEWASM_DEV_KUBECONFIG_OUT", default_value = ".kubewasm/kubeconfig")]
    pub kubeconfig_out: PathBuf,
    /// The host's flags, as for `kubewasm run` (`--kubeconfig` is the control plane's).
    #[command(flatten)]
    pub run: RunArgs,
}

impl DevArgs {
    /// Starts the control plane, writes its kubeconfig, prints how to use it and runs the host on
    /// it until SIGINT/SIGTERM; then stops the host, the control plane and removes the kubeconfig.
    pub async fn execute(self) -> anyhow::Result<()> {
        let DevArgs { with_gc, control_plane_only, kubeconfig_out, mut run } = self;
        let token = CancellationToken::new();
        shutdown::on_signal(token.clone());
        eprintln!(
            "kubewasm dev: starting etcd and kube-apiserver{} (the binaries `make control-plane` builds)",
            if with_gc { " and kube-controller-manager's garbage collector" } else { "" }
        );
        let control_plane = tokio::task::spawn_blocking(move || {
            let builder = kubewasm_testenv::ControlPlane::builder();
            if with_gc { builder.controller_manager() } else { builder }.start()
        })
        .await??;
        write_kubeconfig(control_plane.kubeconfig_path(), &kubeconfig_out)?;
        // What is printed works as printed: from any directory, with or without kubectl on PATH.
        let kubeconfig_abs = std::path::absolute(&kubeconfig_out).unwrap_or_else(|_| kubeconfig_out.clone());
        let kubeconfig = kubeconfig_abs.display();
        let kubectl = match on_path("kubectl") {
            true => "kubectl".to_owned(),
            false => control_plane.kubectl_path().display().to_string(),
        };
        let plugins = match (&run.plugins, control_plane_only) {
            (_, true) => "(no host: --control-plane-only)".to_owned(),
            (Some(dir), false) => dir.display().to_string(),
            (None, false) => "(none: --plugins DIR)".to_owned(),
        };
        println!(
            "kubewasm dev: control plane ready in {:?}\n\
             \x20 kubeconfig:  {kubeconfig}\n\
             \x20 try:         {kubectl} --kubeconfig {kubeconfig} create namespace demo\n\
             \x20              {kubectl} --kubeconfig {kubeconfig} get all,events -A\n\
             \x20 plugins:     {plugins} (add, change or remove <name>.wasm, .py, .js, <name>/ or .yaml; they reload)\n\
             \x20 logs:        {}\n\
             \x20 Ctrl-C stops the host and the control plane.",
            control_plane.apiserver_startup_time(),
            control_plane.dir().display()
        );
        run.kubeconfig = Some(kubeconfig_out.clone());
        run.context = None;
        // Plugins run as they would deployed, each as its own ServiceAccount, whose RBAC the host
        // makes here with the local control plane's admin credentials.
        run.impersonate_plugins = true;
        run.provision_plugin_rbac = true;
        // A saved plugin is served in seconds: Winch compiles a Python or JavaScript component
        // (an interpreter and the plugin) several times faster than Cranelift (BENCHMARKS.md
        // "Edit → effect"); `--compiler cranelift` measures what a deployment runs.
        run.compiler.get_or_insert(Compiler::Winch);
        let result = match (token.is_cancelled(), control_plane_only) {
            (true, _) => Ok(()),
            (false, true) => {
                token.cancelled().await;
                Ok(())
            }
            (false, false) => serve::serve(run, token).await,
        };
        let _ = std::fs::remove_file(&kubeconfig_out);
        tokio::task::spawn_blocking(move || drop(control_plane)).await?;
        eprintln!("kubewasm dev: stopped");
        result
    }
}

/// Whether an executable file `name` is in a directory of `$PATH`.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(path) = std::env::var_os("PATH") else { return false };
    std::env::split_paths(&path)
        .filter_map(|dir| std::fs::metadata(dir.join(name)).ok())
        .any(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Copies the control plane's kubeconfig to `out` atomically (written beside it, then renamed).
fn write_kubeconfig(from: &Path, out: &Path) -> anyhow::Result<()> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let partial = out.with_extension("partial");
    std::fs::copy(from, &partial).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, out).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::cli::{Cli, Command};
    use clap::Parser as _;
    use std::path::PathBuf;

    #[test]
    fn dev_takes_run_flags_and_defaults_to_the_plugins_directory_with_hot_reload() {
        let cli = Cli::try_parse_from(["kubewasm", "dev", "--plugins", "p", "--with-gc"]).unwrap();
        let Command::Dev(dev) = cli.command else { panic!("not dev") };
        assert!(dev.with_gc && dev.run.watch_plugins);
        assert_eq!(dev.run.plugins, Some(PathBuf::from("p")));
        assert_eq!(dev.kubeconfig_out, PathBuf::from(".kubewasm/kubeconfig"));
    }
}
