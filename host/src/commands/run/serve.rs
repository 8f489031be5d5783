//! `kubewasm run`'s host: the host library's [`App`] and its sources, leader election, shard membership
//! and admin server, started from `run`'s flags and served until shutdown.

use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use kubewasm_host::admin;
use kubewasm_host::app::{App, config, plugin_client};
use kubewasm_host::hotload::Options;
use kubewasm_host::hotload::oci::{Puller, Registries};
use kubewasm_host::leader;
use kubewasm_host::plugin::RuntimeConfig;
use kubewasm_host::plugin::throttle::WriteRate;
use kubewasm_host::rbac::Identity;
use kubewasm_host::shard::{self, ShardGate};
use tokio_util::sync::CancellationToken;

use super::RunArgs;

/// This process's binary, for child processes (what `/proc/self/exe` points to); `None`, logged,
/// when it cannot be found, e.g. without a mounted /proc.
fn own_executable() -> Option<std::path::PathBuf> {
    match std::env::current_exe() {
        Ok(exe) => Some(exe),
        Err(error) => {
            tracing::warn!(%error, "cannot find the host's own executable: plugins compile inside the host");
            None
        }
    }
}

/// The host's own share of a memory-limited container: a quarter of the limit, at least this.
const HOST_MEMORY_SHARE: u64 = 128 << 20;

/// The plugins' memory budget in a memory-limited container: its cgroup's limit less the host's
/// own share; `None` without a limit. Hand-written: reading one cgroup file (v2, else v1) needs
/// no crate.
fn container_memory_budget() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok()?.trim().parse::<u64>().ok();
    let limit = read("/sys/fs/cgroup/memory.max").or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))?;
    budget_within(limit)
}

/// What plugins may reserve within a container limit of `limit` bytes; `None` for "no limit"
/// (cgroup v1 reports one as a number near `i64::MAX`).
fn budget_within(limit: u64) -> Option<u64> {
    (limit < 1 << 50).then(|| limit.saturating_sub((limit / 4).max(HOST_MEMORY_SHARE)))
}

/// `kubewasm run`: serve until `shutdown` is cancelled.
pub async fn serve(args: RunArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.impersonate_plugins || !args.provision_plugin_rbac,
        "--provision-plugin-rbac makes the plugins' own identities, which --impersonate-plugins=false does not use"
    );
    let config = config(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let client = Client::try_from(config.clone())?;
    let plugin_client = plugin_client(config)?;
    let identity = args.impersonate_plugins.then(|| Identity {
        namespace: leader::default_namespace(),
        host_service_account: args.host_service_account.clone(),
    });
    let options = Options {
        requeue_on_swap: args.requeue_on_swap,
        grace: Duration::from_secs(args.shutdown_grace_seconds),
        identity,
        provision_rbac: args.provision_plugin_rbac,
        elide_unchanged_writes: args.elide_unchanged_writes,
        write_seats: args.write_seats as usize,
        ..Options::default()
    };
    let mut runtime = RuntimeConfig::default()
        .pool_instances(args.pool_instances)
        .memory_budget(args.plugin_memory_budget.or_else(container_memory_budget))
        .max_concurrent_cap(args.max_concurrent_cap)
        .write_rate(WriteRate { qps: args.plugin_write_qps, burst: args.plugin_write_burst })
        .write_timeout(Duration::from_secs(args.plugin_write_timeout_seconds))
        .compiler(args.compiler.unwrap_or_default());
    if let Some(dir) = &args.engine_dir {
        runtime = runtime.engine_dir(dir);
    }
    if let Some(dir) = &args.compile_cache {
        runtime = runtime.cache_dir(dir);
        if let Some(exe) = args.compile_in_child.then(own_executable).flatten() {
            runtime = runtime.compile_in_child(exe);
        }
    }
    let mut app = App::with_plugin_client(client.clone(), plugin_client, runtime, args.max_retries, options)?;
    // The leader's and the shard members' Leases, whether or not this replica elects or shards:
    // another replica of the same group may.
    let lease_namespace = args.leader_election_namespace.clone().unwrap_or_else(leader::default_namespace);
    app.protected().leases(&lease_namespace, &args.leader_election_id);
    let mut election =
        args.leader_config().map(|c| leader::Election::start(client.clone(), c, app.registry())).transpose()?;
    if let Some(election) = &election {
        app.set_leader_gate(election.gate());
    }
    let gate = ShardGate::sharded();
    let mut membership =
        args.shard_config().map(|c| shard::Membership::start(client, c, gate.clone(), app.registry())).transpose()?;
    if membership.is_some() {
        app.set_shard_gate(gate);
    }
    let router = admin::router(app.registry().clone(), app.readiness().clone());
    let (addr, admin_task) = admin::serve(args.admin_addr, router, shutdown.clone().cancelled_owned())
        .await
        .with_context(|| format!("cannot serve the admin endpoints on {} (--admin-addr)", args.admin_addr))?;
    tracing::info!(%addr, "admin server listening");
    // Both sources register their (failing) readiness checks before either starts, so /readyz
    // cannot pass between the directory's first pass and the WasmPlugin source's start.
    let oci = args.oci.options(args.compile_cache.as_deref()).context("reading --oci-ca-file")?;
    let oci_refresh = Duration::from_secs(args.oci.oci_refresh_seconds);
    // One puller for both sources: one per-registry limit, one disk cache.
    let puller = Puller::new(&oci);
    let wasm_source = args.wasm_plugins.then(|| {
        let source = app.wasm_plugin_source(&args.module_namespace).puller(puller.clone()).oci_refresh(oci_refresh);
        match &args.wasm_plugin_selector {
            Some(selector) => source.selector(selector),
            None => source,
        }
    });
    let directory = args.plugins.as_ref().map(|dir| {
        let registries = Registries::new(puller.clone(), app.client().clone(), args.module_namespace.clone());
        (dir, app.directory_source(dir).oci(registries, oci_refresh))
    });
    let mut sources = Vec::new();
    if let Some(source) = wasm_source {
        let stop = shutdown.clone();
        sources.push(tokio::spawn(async move {
            source.run(stop).await;
            Ok(())
        }));
    }
    if let Some((dir, mut source)) = directory {
        let changes = source.sync().await?;
        if changes.is_empty() {
            tracing::warn!(dir = %dir.display(), "no *.wasm plugins found");
        }
        if args.watch_plugins {
            let debounce = Duration::from_millis(args.reload_debounce_ms);
            sources.push(tokio::spawn(source.watch(debounce, shutdown.clone())));
        }
    }
    if let Some(election) = election.as_mut() {
        tokio::select! {
            () = shutdown.cancelled() => {}
            lost = election.lost() => exit_on_lost_leadership(&lost),
        }
    }
    if let Some(membership) = membership.as_mut() {
        tokio::select! {
            () = shutdown.cancelled() => {}
            lost = membership.lost() => exit_on_lost_leadership(&lost),
        }
    }
    shutdown.cancelled().await;
    // No new plugin versions after SIGTERM: stop the sources where they are (the plugins keeps
    // whatever serves, so nothing escapes the shutdown below).
    for source in &sources {
        source.abort();
    }
    for source in sources {
        if let Ok(Err(e)) = source.await {
            tracing::error!(error = format!("{e:#}"), "plugin source failed");
        }
    }
    // No new keys either: only the reconciles in flight may finish, within the grace period.
    // A leader keeps watching its lease meanwhile: once it is lost another replica may lead,
    // so nothing may be written any more.
    let grace = Duration::from_secs(args.shutdown_grace_seconds);
    let drain = app.shut_down(grace);
    let finished = match (election.as_mut(), membership.as_mut()) {
        (Some(election), _) => tokio::select! {
            finished = drain => finished,
            lost = election.lost() => exit_on_lost_leadership(&lost),
        },
        (None, Some(membership)) => tokio::select! {
            finished = drain => finished,
            lost = membership.lost() => exit_on_lost_leadership(&lost),
        },
        (None, None) => drain.await,
    };
    if finished {
        tracing::info!("all in-flight reconciles finished; exiting");
    } else {
        tracing::warn!(?grace, "grace period over with reconciles still running; exiting");
    }
    if let Some(election) = election {
        let bound = Duration::from_secs(args.leader_election_renew_deadline_seconds);
        if tokio::time::timeout(bound, election.release()).await.is_err() {
            tracing::warn!(?bound, "could not release the leader lease in time; it will expire");
        }
    }
    if let Some(membership) = membership {
        let bound = Duration::from_secs(args.leader_election_renew_deadline_seconds);
        if tokio::time::timeout(bound, membership.leave()).await.is_err() {
            tracing::warn!(?bound, "could not leave the shard group in time; the Lease will expire");
        }
    }
    admin_task.await??;
    Ok(())
}

/// Exits at once, as controller-runtime does: no reconcile may run, and nothing may be written,
/// once another replica can lead; a restart campaigns afresh with warm-up.
fn exit_on_lost_leadership(lost: &leader::Error) -> ! {
    tracing::error!(error = %lost, "leader election lost; exiting");
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_get_a_containers_limit_less_the_hosts_share_and_no_budget_without_a_limit() {
        const MIB: u64 = 1 << 20;
        assert_eq!(budget_within(512 * MIB), Some(384 * MIB));
        assert_eq!(budget_within(4096 * MIB), Some(3072 * MIB));
        assert_eq!(budget_within(100 * MIB), Some(0), "a tiny container leaves plugins nothing");
        assert_eq!(budget_within(9_223_372_036_854_771_712), None, "cgroup v1's 'no limit'");
    }
}
