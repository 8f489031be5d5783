//! `kubewasm:controller/cache`: reads of the informer cache, checked against the plugin's grants.

use kube::core::GroupVersionKind;

use super::{CallError, ListOptions, ObjectRef, address};
use crate::bindings::v0_2::{cache as c2, types as t2};
use crate::bindings::{cache, types};
use crate::state::PluginCtx;

type CallResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl PluginCtx {
    /// `Forbidden` unless the plugin may read `kind` (the cache shows a confined plugin only
    /// what it may see), as the authorizer decides a read.
    pub(crate) fn check_read(&mut self, kind: &GroupVersionKind) -> Result<(), CallError> {
        self.shared.authorizer.may_read(kind).map_err(|why| {
            let message = self.shared.authorizer.read_message(kind, &why);
            self.denied.push(message.clone());
            CallError::Forbidden(message)
        })
    }

    /// Counts the call and converts its result to the WIT error (of either contract version).
    pub(crate) fn finish<T, E: From<CallError>>(
        &self,
        function: &'static str,
        result: Result<T, CallError>,
    ) -> Result<T, E> {
        let label = result.as_ref().map_or_else(CallError::metric_label, |_| "ok");
        self.count(function, label);
        result.map_err(Into::into)
    }

    fn cache_get(
        &mut self,
        kind: GroupVersionKind,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<Vec<u8>>, CallError> {
        let target = ObjectRef { kind, namespace, name };
        address::check(&target)?;
        self.check_read(&target.kind)
            .and_then(|()| self.shared.cache.get(&target.kind, target.namespace.as_deref(), &target.name))
    }

    fn cache_by_index(
        &mut self,
        kind: GroupVersionKind,
        index: String,
        value: String,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        let max_bytes = self.copy_bound();
        self.check_read(&kind).and_then(|()| self.shared.cache.by_index(&kind, &index, &value, max_bytes))
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
    async fn get(&mut self, kind: types::Gvk, namespace: Option<String>, name: String) -> CallResult<Option<Vec<u8>>> {
        self.charge()?;
        let result = self.cache_get(kind.into(), namespace, name);
        Ok(self.finish("cache.get", result))
    }

    async fn list(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> CallResult<Vec<Vec<u8>>> {
        self.charge()?;
        let (kind, max_bytes) = (kind.into(), self.copy_bound());
        let (namespace, selector) = (namespace.as_deref(), label_selector.as_deref());
        let result =
            self.check_read(&kind).and_then(|()| self.shared.cache.list(&kind, namespace, selector, max_bytes));
        Ok(self.finish("cache.list", result))
    }

    async fn by_index(&mut self, kind: types::Gvk, index: String, value: String) -> CallResult<Vec<Vec<u8>>> {
        self.charge()?;
        let result = self.cache_by_index(kind.into(), index, value);
        Ok(self.finish("cache.by-index", result))
    }
}

impl types::Host for PluginCtx {}

type CallResult2<T> = wasmtime::Result<Result<T, t2::Error>>;

/// Contract 0.2: `list` pages and takes a field selector; `get` and `by-index` as in 0.1.
impl c2::Host for PluginCtx {
    async fn get(&mut self, kind: t2::Gvk, namespace: Option<String>, name: String) -> CallResult2<Option<Vec<u8>>> {
        self.charge()?;
        let result = self.cache_get(kind.into(), namespace, name);
        Ok(self.finish("cache.get", result))
    }

    async fn list(&mut self, kind: t2::Gvk, options: c2::ListOptions) -> CallResult2<c2::ObjectList> {
        self.charge()?;
        let (kind, max_bytes) = (kind.into(), self.copy_bound());
        let options = ListOptions {
            namespace: options.namespace,
            label_selector: options.label_selector,
            field_selector: options.field_selector,
            limit: options.limit,
            continue_token: options.continue_token,
        };
        let result = self
            .check_read(&kind)
            .and_then(|()| self.shared.cache.list_page(&kind, &options, max_bytes))
            .map(|page| c2::ObjectList { items: page.items, continue_token: page.continue_token });
        Ok(self.finish("cache.list", result))
    }

    async fn by_index(&mut self, kind: t2::Gvk, index: String, value: String) -> CallResult2<Vec<Vec<u8>>> {
        self.charge()?;
        let result = self.cache_by_index(kind.into(), index, value);
        Ok(self.finish("cache.by-index", result))
    }
}

impl t2::Host for PluginCtx {}
