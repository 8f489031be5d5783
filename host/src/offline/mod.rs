//! Offline runs of a plugin: its real runtime, limits and grants over informer caches seeded
//! from fixture objects, with the write path in recording mode (`kubewasm test`).
//!
//! A run loads the plugin as the host does, serves its reads from [`Informer::seeded`] caches
//! wired as the controller wires them (indexes, label selectors, namespace confinement), calls
//! `map` for every cached object of a watched kind, then `reconcile` for every key — the for
//! kind's objects and what `map` returned, or the keys asked for — and reports the writes and
//! Events each call would have made.

pub mod dry_run;
pub mod fixtures;
mod load;
pub mod record;
mod report;
pub mod settle;

pub use load::{RuntimeArgs, config_with_settings, now_to_the_second, parse_time, plugin_bytes, plugin_file, runtime};
pub use report::{Diff, Report, diff, parse_expected};

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

use dry_run::{DryRunWriter, Finding};

use kubewasm_host::controller::{PluginCache, serve_reads, wanted_informers};
use kubewasm_host::informer::{CachedObject, Informer, parse_label_selector};
use kubewasm_host::plugin::api::{ApiCall, RecordingWriter};
use kubewasm_host::plugin::api::{ApiWriter, CacheReader};
use kubewasm_host::plugin::grants::KindRef;
use kubewasm_host::plugin::{Action, ObjectKey, Plugin, PluginConfig, Runtime};

/// Why an offline run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A fixture file is not a set of objects.
    #[error("fixtures: {0}")]
    Fixture(String),
    /// The plugin did not load.
    #[error(transparent)]
    Load(Box<kubewasm_host::plugin::LoadError>),
    /// A cache did not sync in time (recording against a cluster).
    #[error("the cache of {kind} did not sync within {timeout:?}{}", .last_error.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    NotSynced {
        /// The kind.
        kind: KindRef,
        /// How long we waited.
        timeout: std::time::Duration,
        /// The informer's last list or watch error.
        last_error: Option<String>,
    },
    /// Its reads could not be wired (an index on a kind it does not read, …).
    #[error(transparent)]
    Wiring(#[from] Box<kubewasm_host::controller::Error>),
    /// A cache could not be built.
    #[error(transparent)]
    Informer(Box<kubewasm_host::informer::Error>),
}

impl From<kubewasm_host::plugin::LoadError> for Error {
    fn from(e: kubewasm_host::plugin::LoadError) -> Self {
        Error::Load(Box::new(e))
    }
}

impl From<kubewasm_host::informer::Error> for Error {
    fn from(e: kubewasm_host::informer::Error) -> Self {
        Error::Informer(Box::new(e))
    }
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A plugin loaded over seeded caches with its writes recorded.
pub struct Harness {
    plugin: Plugin,
    recorder: Arc<RecordingWriter>,
    informers: BTreeMap<KindRef, Informer>,
    /// The kind and label selector of each informer, to seed it again.
    wanted: BTreeMap<KindRef, (kube::core::GroupVersionKind, Option<String>)>,
    dry_run: Option<Arc<DryRunWriter>>,
    findings: Mutex<Vec<(String, Finding)>>,
}

impl Harness {
    /// Loads `wasm` as plugin `name` with `config`, caching `objects` for the kinds it reads.
    pub async fn load(
        runtime: &Runtime,
        name: &str,
        wasm: Arc<[u8]>,
        config: PluginConfig,
        objects: &[Value],
    ) -> Result<Self> {
        Self::load_checked(runtime, name, wasm, config, objects, None).await
    }

    /// [`Harness::load`], with each write also sent to `server`, a writer that stores nothing
    /// (a server-side dry run, [`dry_run`]), if given.
    pub async fn load_checked(
        runtime: &Runtime,
        name: &str,
        wasm: Arc<[u8]>,
        config: PluginConfig,
        objects: &[Value],
        server: Option<Arc<dyn ApiWriter>>,
    ) -> Result<Self> {
        let seeded = |gvk: &kube::core::GroupVersionKind, selector: Option<&str>| {
            std::future::ready(seeded(objects, gvk, selector))
        };
        let (harness, _) = Self::load_with(runtime, name, wasm, config, |cache| cache, seeded, server).await?;
        Ok(harness)
    }

    /// Loads the plugin with its reads going through `wrap(cache)` (e.g. to record them) and
    /// the informer of each kind it reads built by `informer(kind, label selector)`, and its
    /// writes also sent to `server` if given.
    pub(crate) async fn load_with<C: CacheReader, F>(
        runtime: &Runtime,
        name: &str,
        wasm: Arc<[u8]>,
        config: PluginConfig,
        wrap: impl FnOnce(Arc<PluginCache>) -> Arc<C>,
        mut informer: impl FnMut(&kube::core::GroupVersionKind, Option<&str>) -> F,
        server: Option<Arc<dyn ApiWriter>>,
    ) -> Result<(Self, Arc<C>)>
    where
        F: std::future::Future<Output = Result<Informer>>,
    {
        let cache = Arc::new(PluginCache::new(name));
        let reads = wrap(cache.clone());
        let recorder = Arc::new(RecordingWriter::new(Some(reads.clone() as Arc<dyn CacheReader>)));
        let dry_run = server.map(|server| Arc::new(DryRunWriter::new(recorder.clone(), server)));
        let writer = match &dry_run {
            Some(dry_run) => dry_run.clone() as Arc<dyn ApiWriter>,
            None => recorder.clone() as Arc<dyn ApiWriter>,
        };
        let plugin = runtime.load(name, wasm, config, reads.clone(), writer).await?;
        let (mut informers, mut wanted) = (BTreeMap::new(), BTreeMap::new());
        for (kind, (gvk, selector)) in wanted_informers(&plugin) {
            informers.insert(kind.clone(), informer(&gvk, selector.as_deref()).await?);
            wanted.insert(kind, (gvk, selector));
        }
        serve_reads(&plugin, &cache, &informers)?;
        Ok((Self { plugin, recorder, informers, wanted, dry_run, findings: Mutex::default() }, reads))
    }

    /// The loaded plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// Waits until every cache the plugin reads has synced, at most `timeout` each.
    pub async fn wait_for_sync(&self, timeout: std::time::Duration) -> Result<()> {
        for (kind, informer) in &self.informers {
            if !matches!(tokio::time::timeout(timeout, informer.wait_for_sync()).await, Ok(Ok(()))) {
                return Err(Error::NotSynced { kind: kind.clone(), timeout, last_error: informer.last_error() });
            }
        }
        Ok(())
    }

    /// Calls `map` for every cached object of each watched kind, in kind and key order: one
    /// report entry per call that wrote or failed, and the keys returned.
    pub async fn map_watched(&self) -> (Vec<Value>, BTreeSet<ObjectKey>) {
        let (mut entries, mut keys) = (Vec::new(), BTreeSet::new());
        for watch in &self.plugin.registration().watches {
            let Some(informer) = self.informers.get(&KindRef::of(&watch.kind)) else { continue };
            let mut objects = informer.store().list();
            objects.sort_by(|a, b| a.key().cmp(b.key()));
            for object in objects {
                let what = format!("{} {} {}", watch.kind.api_version(), watch.kind.kind, object.key());
                let result = self.plugin.map(&watch.kind, object.json()).await;
                let writes = self.writes();
                self.note_findings(&format!("map {what}"));
                match result {
                    Ok(mapped) => {
                        let mut invalid = Vec::new();
                        for key in mapped {
                            match key {
                                Ok(key) => {
                                    keys.insert(key);
                                }
                                Err(e) => invalid.push(e.to_string()),
                            }
                        }
                        if !invalid.is_empty() {
                            entries.push(json!({ "map": what, "error": invalid.join("; "), "writes": writes }));
                        } else if writes.as_array().is_some_and(|w| !w.is_empty()) {
                            entries.push(json!({ "map": what, "writes": writes }));
                        }
                    }
                    Err(e) => entries.push(json!({ "map": what, "error": e.to_string(), "writes": writes })),
                }
            }
        }
        (entries, keys)
    }

    /// The keys of every cached object of the for kind (within its label selector).
    pub fn for_keys(&self) -> BTreeSet<ObjectKey> {
        let for_kind = KindRef::of(&self.plugin.registration().for_kind);
        let objects = self.informers.get(&for_kind).map(|i| i.store().list()).unwrap_or_default();
        objects.iter().map(|o| ObjectKey::of(o)).collect()
    }

    /// Reconciles `key` once (attempt 0): its report entry.
    pub async fn reconcile(&self, key: &ObjectKey) -> Value {
        self.reconcile_calls(key).await.0
    }

    /// Reconciles `key` once (attempt 0): its report entry and the calls it made. A plugin that
    /// returned a desired state (contract 0.3) has it in the entry (`desired`: its children and
    /// status as it returned them), beside the writes the host made of it.
    pub async fn reconcile_calls(&self, key: &ObjectKey) -> (Value, Vec<ApiCall>) {
        let (result, desired) = self.plugin.reconcile_with_desired(key, 0).await;
        let result = match result {
            Ok(Action::Done) => "done".to_owned(),
            Ok(Action::RequeueAfter(after)) => format!("requeue after {after:?}"),
            Err(e) => format!("error: {e}"),
        };
        self.note_findings(&format!("reconcile {key}"));
        let calls = self.recorder.take();
        let writes: Value = calls.iter().map(ApiCall::to_value).collect();
        let mut entry = json!({ "reconcile": key.to_string(), "result": result, "writes": writes });
        if let Some(desired) = desired {
            entry["desired"] = desired_value(&desired);
        }
        (entry, calls)
    }

    /// Makes the caches hold `objects` (within each kind's label selector) instead of what they
    /// held: the state a round of `--until-settled` left.
    pub fn reseed(&self, objects: &[Value]) {
        for (kind, informer) in &self.informers {
            let Some((gvk, selector)) = self.wanted.get(kind) else { continue };
            let fresh = match seeded(objects, gvk, selector.as_deref()) {
                Ok(fresh) => fresh.store().list(),
                Err(e) => {
                    tracing::warn!(%kind, error = %e, "cannot cache the objects of a round");
                    continue;
                }
            };
            let store = informer.store();
            let keep: HashSet<Arc<str>> = fresh.iter().map(|o| o.key_arc().clone()).collect();
            store.retain_keys(&keep);
            for object in fresh {
                store.upsert(object);
            }
        }
    }

    /// What the server-side dry run found, each with the call (`reconcile a/b`) whose write it
    /// is about, since the last call; empty without a dry run.
    pub fn findings(&self) -> Vec<(String, Finding)> {
        std::mem::take(&mut *self.findings.lock())
    }

    fn note_findings(&self, call: &str) {
        let Some(dry_run) = &self.dry_run else { return };
        self.findings.lock().extend(dry_run.take().into_iter().map(|f| (call.to_owned(), f)));
    }

    fn writes(&self) -> Value {
        self.recorder.take().iter().map(ApiCall::to_value).collect()
    }
}

/// A desired state as the report shows it: each child and the status as JSON (a part that is
/// not JSON as the text the plugin returned, which its reconcile's error explains).
fn desired_value(desired: &kubewasm_host::plugin::Desired) -> Value {
    let json = |bytes: &[u8]| {
        serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
    };
    let mut value = json!({ "children": desired.children.iter().map(|c| json(c)).collect::<Vec<_>>() });
    if let Some(status) = &desired.status {
        value["status"] = json(status);
    }
    value
}

/// An informer of `gvk` holding the fixture objects of its kind that match `selector`.
fn seeded(objects: &[Value], gvk: &kube::core::GroupVersionKind, selector: Option<&str>) -> Result<Informer> {
    // Any version of the kind: the cache serves every version a plugin names (PluginCache).
    let of_kind = objects.iter().filter(|o| {
        let api_version = o["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        o["kind"] == gvk.kind.as_str() && group == gvk.group
    });
    let mut cached = Vec::new();
    for object in of_kind {
        cached.push(CachedObject::from_json(serde_json::to_vec(object).unwrap_or_default())?);
    }
    let informer = Informer::seeded(gvk, cached)?;
    let Some(selector) = selector.filter(|s| !s.is_empty()) else { return Ok(informer) };
    parse_label_selector(selector).map_err(|e| Error::Fixture(format!("label selector {selector}: {e}")))?;
    let matching = informer.store().list_selected(None, selector)?;
    let mut kept = Vec::new();
    for object in matching {
        kept.push(CachedObject::from_json(object.json().to_vec())?);
    }
    Ok(Informer::seeded(gvk, kept)?)
}

/// Runs `harness` over `keys`, or over every key its for kind caches and its maps return: the
/// report of every call.
pub async fn run(harness: &Harness, keys: Option<Vec<ObjectKey>>) -> Report {
    run_until_settled(harness, keys, None).await.0
}

/// [`run`], each key then reconciled again with its writes applied to `objects` (the
/// fixtures) until they change nothing, at most `rounds` times ([`settle`]), if given: the
/// report of the first round of each key, and each key's rounds or why it did not settle.
pub async fn run_until_settled(
    harness: &Harness,
    keys: Option<Vec<ObjectKey>>,
    settle: Option<(&[Value], u32)>,
) -> (Report, Vec<(ObjectKey, Result<u32, settle::NotSettled>)>) {
    let mut settled = Vec::new();
    let mut entries = Vec::new();
    let keys = match keys {
        Some(keys) => keys,
        None => {
            let (maps, mut keys) = harness.map_watched().await;
            entries.extend(maps);
            keys.extend(harness.for_keys());
            keys.into_iter().collect()
        }
    };
    for key in &keys {
        let (entry, calls) = harness.reconcile_calls(key).await;
        entries.push(entry);
        if let Some((objects, rounds)) = settle {
            settled.push((key.clone(), settle::until_settled(harness, objects, key, calls, rounds).await));
        }
    }
    (Report(entries), settled)
}
