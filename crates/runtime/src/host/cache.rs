//! `kubewasm:controller/cache`: reads of the informer cache, checked against the plugin's grants,
//! written once for every contract version (`bindings` adapts each version's arguments).

use kube::core::GroupVersionKind;

use super::function::Outcome;
use crate::api::{CallError, ListOptions, ObjectList, ObjectRef, address};
use crate::state::PluginCtx;

impl PluginCtx {
    /// `cache.get`: the cached object, if any.
    pub(crate) fn cache_get<E: From<CallError>>(&mut self, target: ObjectRef) -> Outcome<Option<Vec<u8>>, E> {
        let checked = address::check(&target).map(|()| &target.kind);
        self.read("cache.get", checked, |ctx| {
            ctx.shared.cache.get(&target.kind, target.namespace.as_deref(), &target.name)
        })
    }

    /// `cache.list` of contract 0.1: every cached object of `kind` in `namespace` matching
    /// `label_selector`.
    pub(crate) fn cache_list<E: From<CallError>>(
        &mut self,
        kind: GroupVersionKind,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Outcome<Vec<Vec<u8>>, E> {
        self.read("cache.list", Ok(&kind), |ctx| {
            let max_bytes = ctx.copy_bound();
            ctx.shared.cache.list(&kind, namespace.as_deref(), label_selector.as_deref(), max_bytes)
        })
    }

    /// `cache.list` of contract 0.2 on: one page of the cached objects of `kind` matching
    /// `options`.
    pub(crate) fn cache_list_page<E: From<CallError>>(
        &mut self,
        kind: GroupVersionKind,
        options: ListOptions,
    ) -> Outcome<ObjectList, E> {
        self.read("cache.list", Ok(&kind), |ctx| ctx.shared.cache.list_page(&kind, &options, ctx.copy_bound()))
    }

    /// `cache.by-index`: the cached objects of `kind` whose index `index` has `value`.
    pub(crate) fn cache_by_index<E: From<CallError>>(
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
