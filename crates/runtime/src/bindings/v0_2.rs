//! The 0.2.0 world: fallible `map`, reconcile errors with a retry policy, paged cached lists,
//! preconditions, status patches, uncached reads, per-use event filters. Its bindings, the
//! conversions of its types, and its imports as calls of the host functions (`crate::host`).

use kubewasm_informer::ObjectKey;
use wasmtime::Store;

use crate::outcome::{Action, CallFailed};
use crate::registration;
use crate::state::PluginCtx;

// As for 0.1: the WIT file is the reference for the docs bindgen does not copy.
#[allow(missing_docs)]
mod generated {
    wasmtime::component::bindgen!({
        world: "controller",
        path: "../../wit/controller@0.2.0",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

pub use generated::kubewasm::controller::{cache, client, config, events, log, types};
pub use generated::{
    Controller, ControllerPre, EventFilter, Index, IndexSource, Owned, Predicates, ReconcileError, Registration,
    Request, Requeue, Watch,
};

/// Calls a 0.2 instance's `reconcile`: its errors say whether and when to retry.
pub(super) async fn reconcile(
    inst: &Controller,
    store: &mut Store<PluginCtx>,
    registration: &registration::Registration,
    key: ObjectKey,
    attempt: u32,
) -> wasmtime::Result<Result<Action, CallFailed>> {
    let request = request(&registration.for_kind, &key, attempt);
    Ok(inst.call_reconcile(store, &request).await?.map(action).map_err(reconcile_error))
}

/// What 0.2 brought to the exports and later versions keep: the calls of `map` and `describe`,
/// the conversions of a reconcile's request, action and error, of the registration (`prune`
/// reads an owned kind's prune policy, which 0.3 added) and of event filters: the world's own
/// types, which every world that includes the controller world (the engine world too) generates
/// again. Invoked inside a version's module, where `generated` and the interfaces and types it
/// re-exports are its generated bindings; a version that changes one of them writes that part
/// itself instead.
macro_rules! since_0_2_exports {
    (prune: $prune:expr) => {
        /// The request of a reconcile of `key`.
        fn request(
            for_kind: &kube::core::GroupVersionKind,
            key: &kubewasm_informer::ObjectKey,
            attempt: u32,
        ) -> Request {
            let key = types::ObjectKey { namespace: key.namespace().map(str::to_owned), name: key.name().to_owned() };
            Request { kind: for_kind.into(), key, attempt }
        }

        /// What to do with the key after a reconcile that succeeded.
        fn action(action: generated::Action) -> crate::outcome::Action {
            match action {
                generated::Action::Done => crate::outcome::Action::Done,
                generated::Action::RequeueAfter(ms) => {
                    crate::outcome::Action::RequeueAfter(std::time::Duration::from_millis(ms))
                }
            }
        }

        /// Why a reconcile failed, and so whether and when it is retried.
        fn reconcile_error(e: ReconcileError) -> crate::outcome::CallFailed {
            use crate::outcome::CallFailed;
            match e {
                ReconcileError::Retryable(m) => CallFailed::Plugin(m),
                ReconcileError::Terminal(m) => CallFailed::Terminal(m),
                ReconcileError::RequeueAfter(r) => {
                    CallFailed::RequeueAfter { after: std::time::Duration::from_millis(r.after_ms), reason: r.reason }
                }
            }
        }

        /// Calls an instance's `map`; its error is the plugin's, retried like a trap by the mapper.
        pub(super) async fn map(
            inst: &Controller,
            store: &mut wasmtime::Store<crate::state::PluginCtx>,
            kind: &kube::core::GroupVersionKind,
            object: &[u8],
        ) -> wasmtime::Result<
            Result<
                Vec<Result<kubewasm_informer::ObjectKey, kubewasm_informer::InvalidKey>>,
                crate::outcome::CallFailed,
            >,
        > {
            use kubewasm_informer::ObjectKey;
            let keys = inst.call_map(store, &kind.into(), object).await?;
            Ok(keys
                .map(|keys| keys.into_iter().map(|k| ObjectKey::parse(k.namespace.as_deref(), &k.name)).collect())
                .map_err(|e| {
                    crate::outcome::CallFailed::Plugin(format!("map failed: {}", crate::api::CallError::from(e)))
                }))
        }

        /// Calls an instance's `describe`.
        pub(super) async fn describe(
            inst: &Controller,
            store: &mut wasmtime::Store<crate::state::PluginCtx>,
        ) -> wasmtime::Result<crate::registration::Registration> {
            inst.call_describe(store).await.map(Into::into)
        }

        /// Selectors are event filters; no informer is selected; `$prune` reads an owned kind's prune
        /// policy (0.3).
        impl From<Registration> for crate::registration::Registration {
            fn from(r: Registration) -> Self {
                Self {
                    for_kind: r.for_kind.into(),
                    for_label_selector: None,
                    for_filter: r.for_filter.into(),
                    owns_filters: r.owns.iter().map(|o| o.filter.clone().into()).collect(),
                    owns_prune: r.owns.iter().map($prune).collect(),
                    owns: r.owns.into_iter().map(|o| o.kind.into()).collect(),
                    watches: r
                        .watches
                        .into_iter()
                        .map(|w| crate::registration::WatchSpec {
                            kind: w.kind.into(),
                            label_selector: None,
                            filter: w.filter.into(),
                        })
                        .collect(),
                    reads: r.reads.into_iter().map(Into::into).collect(),
                    writes: r.writes.into_iter().map(Into::into).collect(),
                    indexes: r
                        .indexes
                        .into_iter()
                        .map(|i| crate::registration::IndexSpec {
                            kind: i.kind.into(),
                            name: i.name,
                            source: match i.source {
                                IndexSource::Field(f) => crate::registration::IndexSource::Field(f),
                                IndexSource::Builtin(b) => crate::registration::IndexSource::Builtin(b),
                            },
                        })
                        .collect(),
                    max_concurrent: r.max_concurrent,
                }
            }
        }

        impl From<EventFilter> for crate::registration::EventFilter {
            fn from(f: EventFilter) -> Self {
                let p = f.predicates;
                Self {
                    namespace: f.namespace,
                    label_selector: f.label_selector,
                    predicates: crate::registration::Predicates {
                        generation_changed: p.contains(Predicates::GENERATION_CHANGED),
                        labels_changed: p.contains(Predicates::LABELS_CHANGED),
                        annotations_changed: p.contains(Predicates::ANNOTATIONS_CHANGED),
                    },
                }
            }
        }
    };
}
pub(crate) use since_0_2_exports;

/// What 0.2 brought to the imports and later versions keep: `cache` and `client` as calls of the
/// host functions, and the conversion of their errors.
macro_rules! since_0_2_imports {
    () => {
        type Outcome<T> = wasmtime::Result<Result<T, types::Error>>;

        /// `list` pages and takes a field selector; `get` and `by-index` as in 0.1.
        impl cache::Host for crate::state::PluginCtx {
            async fn get(
                &mut self,
                kind: types::Gvk,
                namespace: Option<String>,
                name: String,
            ) -> Outcome<Option<Vec<u8>>> {
                self.cache_get(crate::api::ObjectRef { kind: kind.into(), namespace, name })
            }

            async fn list(&mut self, kind: types::Gvk, options: cache::ListOptions) -> Outcome<cache::ObjectList> {
                let options = crate::api::ListOptions {
                    namespace: options.namespace,
                    label_selector: options.label_selector,
                    field_selector: options.field_selector,
                    limit: options.limit,
                    continue_token: options.continue_token,
                };
                let page = self.cache_list_page(kind.into(), options)?;
                Ok(page.map(|page| cache::ObjectList { items: page.items, continue_token: page.continue_token }))
            }

            async fn by_index(&mut self, kind: types::Gvk, index: String, value: String) -> Outcome<Vec<Vec<u8>>> {
                self.cache_by_index(kind.into(), index, value)
            }
        }

        fn patch_kind(kind: client::PatchType) -> fn(serde_json::Value) -> crate::api::Patch {
            match kind {
                client::PatchType::Merge => crate::api::Patch::Merge,
                client::PatchType::Json => crate::api::Patch::Json,
                client::PatchType::Strategic => crate::api::Patch::Strategic,
            }
        }

        fn preconditions(p: client::Preconditions) -> crate::api::Preconditions {
            crate::api::Preconditions { resource_version: p.resource_version, uid: p.uid }
        }

        /// The writes of 0.1 with force, preconditions and propagation passed through, plus status
        /// patches and the uncached `get`.
        impl client::Host for crate::state::PluginCtx {
            async fn apply(&mut self, object: Vec<u8>, force: bool) -> Outcome<Vec<u8>> {
                self.client_apply(&object, force, false).await
            }

            async fn apply_status(&mut self, object: Vec<u8>, force: bool) -> Outcome<Vec<u8>> {
                self.client_apply(&object, force, true).await
            }

            async fn patch(
                &mut self,
                kind: types::Gvk,
                namespace: Option<String>,
                name: String,
                patch_type: client::PatchType,
                body: Vec<u8>,
                pre: client::Preconditions,
            ) -> Outcome<Vec<u8>> {
                let target = crate::api::ObjectRef { kind: kind.into(), namespace, name };
                let options =
                    crate::api::PatchOptions { status: false, preconditions: preconditions(pre), judged_uid: None };
                self.client_patch(target, &body, patch_kind(patch_type), options).await
            }

            async fn patch_status(
                &mut self,
                kind: types::Gvk,
                namespace: Option<String>,
                name: String,
                patch_type: client::PatchType,
                body: Vec<u8>,
                pre: client::Preconditions,
            ) -> Outcome<Vec<u8>> {
                let target = crate::api::ObjectRef { kind: kind.into(), namespace, name };
                let options =
                    crate::api::PatchOptions { status: true, preconditions: preconditions(pre), judged_uid: None };
                self.client_patch(target, &body, patch_kind(patch_type), options).await
            }

            async fn create(&mut self, object: Vec<u8>) -> Outcome<Vec<u8>> {
                self.client_create(&object).await
            }

            async fn delete(
                &mut self,
                kind: types::Gvk,
                namespace: Option<String>,
                name: String,
                options: client::DeleteOptions,
            ) -> Outcome<()> {
                let target = crate::api::ObjectRef { kind: kind.into(), namespace, name };
                let propagation = match options.propagation_policy {
                    None | Some(client::PropagationPolicy::Background) => crate::api::Propagation::Background,
                    Some(client::PropagationPolicy::Foreground) => crate::api::Propagation::Foreground,
                    Some(client::PropagationPolicy::Orphan) => crate::api::Propagation::Orphan,
                };
                let options = crate::api::DeleteOptions {
                    preconditions: preconditions(options.preconditions),
                    propagation,
                    judged_uid: None,
                };
                self.client_delete(target, options).await
            }

            async fn get(
                &mut self,
                kind: types::Gvk,
                namespace: Option<String>,
                name: String,
            ) -> Outcome<Option<Vec<u8>>> {
                self.client_get(crate::api::ObjectRef { kind: kind.into(), namespace, name }).await
            }
        }

        impl From<types::Error> for crate::api::CallError {
            fn from(e: types::Error) -> Self {
                use types::Error as E;
                match e {
                    E::NotFound => crate::api::CallError::NotFound,
                    E::Forbidden(m) => crate::api::CallError::Forbidden(m),
                    E::Conflict(m) => crate::api::CallError::Conflict(m),
                    E::Invalid(m) => crate::api::CallError::Invalid(m),
                    E::Unavailable(m) => crate::api::CallError::Unavailable(m),
                    E::Other(m) => crate::api::CallError::Other(m),
                }
            }
        }
    };
}
pub(crate) use since_0_2_imports;

// cache and client as 0.2 made them; events, config, log and types, and the kind and error
// conversions, as every version has them.
since_0_2_exports!(prune: |_: &Owned| None);
since_0_2_imports!();
super::same_in_every_version!();
