//! The 0.1.0 world, frozen: what every plugin built before 0.2 implements. Its bindings, the
//! conversions of its types, and its imports as calls of the host functions (`crate::host`).

use std::time::Duration;

use kube::core::GroupVersionKind;
use kubewasm_informer::{InvalidKey, ObjectKey};
use wasmtime::Store;

use crate::api::{DeleteOptions, ObjectRef, Patch, PatchOptions};
use crate::outcome::{Action, CallFailed};
use crate::registration;
use crate::state::PluginCtx;

// Generated code carries the WIT's doc comments where bindgen copies them; the WIT file is the
// reference for the rest.
#[allow(missing_docs)]
mod generated {
    wasmtime::component::bindgen!({
        world: "controller",
        path: "../../wit/controller@0.1.0",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

pub use generated::kubewasm::controller::{cache, client, config, events, log, types};
pub use generated::{Controller, ControllerPre, Index, IndexSource, Registration, Request, Watch};

/// Calls a 0.1 instance's `reconcile`.
pub(super) async fn reconcile(
    inst: &Controller,
    store: &mut Store<PluginCtx>,
    for_kind: &GroupVersionKind,
    key: ObjectKey,
    attempt: u32,
) -> wasmtime::Result<Result<Action, CallFailed>> {
    let key = types::ObjectKey { namespace: key.namespace().map(str::to_owned), name: key.name().to_owned() };
    let request = Request { kind: for_kind.into(), key, attempt };
    let result = inst.call_reconcile(store, &request).await?;
    Ok(result
        .map(|a| match a {
            generated::Action::Done => Action::Done,
            generated::Action::RequeueAfter(ms) => Action::RequeueAfter(Duration::from_millis(ms)),
        })
        .map_err(CallFailed::Plugin))
}

/// Calls a 0.1 instance's `map` (which cannot fail).
pub(super) async fn map(
    inst: &Controller,
    store: &mut Store<PluginCtx>,
    kind: &GroupVersionKind,
    object: &[u8],
) -> wasmtime::Result<Result<Vec<Result<ObjectKey, InvalidKey>>, CallFailed>> {
    let keys = inst.call_map(store, &kind.into(), object).await?;
    Ok(Ok(keys.into_iter().map(|k| ObjectKey::parse(k.namespace.as_deref(), &k.name)).collect()))
}

/// Calls a 0.1 instance's `describe`.
pub(super) async fn describe(
    inst: &Controller,
    store: &mut Store<PluginCtx>,
) -> wasmtime::Result<registration::Registration> {
    inst.call_describe(store).await.map(Into::into)
}

type Outcome<T> = wasmtime::Result<Result<T, types::Error>>;

impl cache::Host for PluginCtx {
    async fn get(&mut self, kind: types::Gvk, namespace: Option<String>, name: String) -> Outcome<Option<Vec<u8>>> {
        self.cache_get(ObjectRef { kind: kind.into(), namespace, name })
    }

    async fn list(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Outcome<Vec<Vec<u8>>> {
        self.cache_list(kind.into(), namespace, label_selector)
    }

    async fn by_index(&mut self, kind: types::Gvk, index: String, value: String) -> Outcome<Vec<Vec<u8>>> {
        self.cache_by_index(kind.into(), index, value)
    }
}

/// Apply-status always forces, patch has no preconditions, delete is background.
impl client::Host for PluginCtx {
    async fn apply(&mut self, object: Vec<u8>, force: bool) -> Outcome<Vec<u8>> {
        self.client_apply(&object, force, false).await
    }

    async fn apply_status(&mut self, object: Vec<u8>) -> Outcome<Vec<u8>> {
        self.client_apply(&object, true, true).await
    }

    async fn patch(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        name: String,
        patch_kind: client::PatchType,
        body: Vec<u8>,
    ) -> Outcome<Vec<u8>> {
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let patch_kind = match patch_kind {
            client::PatchType::Merge => Patch::Merge,
            client::PatchType::Json => Patch::Json,
            client::PatchType::Strategic => Patch::Strategic,
        };
        self.client_patch(target, &body, patch_kind, PatchOptions::default()).await
    }

    async fn create(&mut self, object: Vec<u8>) -> Outcome<Vec<u8>> {
        self.client_create(&object).await
    }

    async fn delete(&mut self, kind: types::Gvk, namespace: Option<String>, name: String) -> Outcome<()> {
        let target = ObjectRef { kind: kind.into(), namespace, name };
        self.client_delete(target, DeleteOptions::default()).await
    }
}

// events, config, log and types, and the kind and error conversions, as every version has them.
super::same_in_every_version!();

impl From<Registration> for registration::Registration {
    fn from(r: Registration) -> Self {
        Self {
            for_kind: r.for_kind.into(),
            for_filter: registration::EventFilter {
                label_selector: r.for_label_selector.clone(),
                ..registration::EventFilter::default()
            },
            for_label_selector: r.for_label_selector,
            owns_filters: vec![registration::EventFilter::default(); r.owns.len()],
            owns_prune: vec![None; r.owns.len()],
            owns: r.owns.into_iter().map(Into::into).collect(),
            watches: r
                .watches
                .into_iter()
                .map(|w| registration::WatchSpec {
                    kind: w.kind.into(),
                    filter: registration::EventFilter {
                        label_selector: w.label_selector.clone(),
                        ..registration::EventFilter::default()
                    },
                    label_selector: w.label_selector,
                })
                .collect(),
            reads: r.reads.into_iter().map(Into::into).collect(),
            writes: r.writes.into_iter().map(Into::into).collect(),
            indexes: r
                .indexes
                .into_iter()
                .map(|i| registration::IndexSpec {
                    kind: i.kind.into(),
                    name: i.name,
                    source: match i.source {
                        IndexSource::Field(f) => registration::IndexSource::Field(f),
                        IndexSource::Builtin(b) => registration::IndexSource::Builtin(b),
                    },
                })
                .collect(),
            max_concurrent: r.max_concurrent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contract_0_1_selector_is_also_its_uses_event_filter_so_the_authorizer_knows_what_is_reconciled() {
        let cm = GroupVersionKind::gvk("", "v1", "ConfigMap");
        let legacy = Registration {
            for_kind: (&cm).into(),
            for_label_selector: Some("app=web".into()),
            owns: vec![(&cm).into()],
            watches: vec![Watch { kind: (&cm).into(), label_selector: Some("app=db".into()) }],
            reads: Vec::new(),
            writes: Vec::new(),
            indexes: Vec::new(),
            max_concurrent: None,
        };
        let reg = registration::Registration::from(legacy);
        assert_eq!(reg.for_filter.label_selector.as_deref(), Some("app=web"));
        assert_eq!(reg.for_label_selector.as_deref(), Some("app=web"));
        assert_eq!(reg.watches[0].filter.label_selector.as_deref(), Some("app=db"));
    }
}
