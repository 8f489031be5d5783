//! `kubewasm:controller/cache`: reads of the informer cache, checked against the plugin's grants.

use kube::core::GroupVersionKind;

use super::function::Outcome;
use crate::api::{CallError, ListOptions, ObjectRef, address};
use crate::bindings::v0_2::{cache as c2, types as t2};
use crate::bindings::{cache, types};
use crate::state::PluginCtx;

impl PluginCtx {
    fn cache_get<E: From<CallError>>(
        &mut self,
        kind: GroupVersionKind,
        namespace: Option<String>,
        name: String,
    ) -> Outcome<Option<Vec<u8>>, E> {
        let target = ObjectRef { kind, namespace, name };
        let checked = address::check(&target).map(|()| &target.kind);
        self.read("cache.get", checked, |ctx| {
            ctx.shared.cache.get(&target.kind, target.namespace.as_deref(), &target.name)
        })
    }

    fn cache_by_index<E: From<CallError>>(
        &mut self,
        kind: GroupVersionKind,
        index: String,
        value: String,
    ) -> Outcome<Vec<Vec<u8>>, E> {
        self.read("cache.by-index", Ok(&kind), |ctx| {
            let max_bytes = ctx.copy_bound();
            ctx.shared.cache.by_index(&kind, &index, &value, max_bytes)
        })
    }

    /// Bytes a cached read may copy for this instance: half of what its memory limit leaves of
    /// `limits.memoryBytes` beside its linear memory. The host's copy is alive while the guest
    /// grows to take it in, so the two together stay within the limit the pool reserved for
    /// the instance (a full share each would let an instance hold about twice its reservation).
    fn copy_bound(&self) -> usize {
        usize::try_from(self.limiter.memory_left() / 2).unwrap_or(usize::MAX)
    }
}

impl cache::Host for PluginCtx {
    async fn get(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        name: String,
    ) -> Outcome<Option<Vec<u8>>, types::Error> {
        self.cache_get(kind.into(), namespace, name)
    }

    async fn list(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Outcome<Vec<Vec<u8>>, types::Error> {
        let kind = kind.into();
        self.read("cache.list", Ok(&kind), |ctx| {
            let max_bytes = ctx.copy_bound();
            ctx.shared.cache.list(&kind, namespace.as_deref(), label_selector.as_deref(), max_bytes)
        })
    }

    async fn by_index(
        &mut self,
        kind: types::Gvk,
        index: String,
        value: String,
    ) -> Outcome<Vec<Vec<u8>>, types::Error> {
        self.cache_by_index(kind.into(), index, value)
    }
}

impl types::Host for PluginCtx {}

/// Contract 0.2: `list` pages and takes a field selector; `get` and `by-index` as in 0.1.
impl c2::Host for PluginCtx {
    async fn get(
        &mut self,
        kind: t2::Gvk,
        namespace: Option<String>,
        name: String,
    ) -> Outcome<Option<Vec<u8>>, t2::Error> {
        self.cache_get(kind.into(), namespace, name)
    }

    async fn list(&mut self, kind: t2::Gvk, options: c2::ListOptions) -> Outcome<c2::ObjectList, t2::Error> {
        let kind = kind.into();
        let options = ListOptions {
            namespace: options.namespace,
            label_selector: options.label_selector,
            field_selector: options.field_selector,
            limit: options.limit,
            continue_token: options.continue_token,
        };
        self.read("cache.list", Ok(&kind), |ctx| {
            let page = ctx.shared.cache.list_page(&kind, &options, ctx.copy_bound())?;
            Ok(c2::ObjectList { items: page.items, continue_token: page.continue_token })
        })
    }

    async fn by_index(&mut self, kind: t2::Gvk, index: String, value: String) -> Outcome<Vec<Vec<u8>>, t2::Error> {
        self.cache_by_index(kind.into(), index, value)
    }
}

impl t2::Host for PluginCtx {}
