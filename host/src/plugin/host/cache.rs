//! `kubewasm:controller/cache`: reads of the informer cache, checked against the plugin's grants.

use kube::core::GroupVersionKind;

use super::CallError;
use crate::plugin::bindings::{cache, types};
use crate::plugin::state::PluginCtx;

type CallResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl PluginCtx {
    /// `Forbidden` unless the plugin may read `kind`.
    pub(crate) fn check_read(&self, kind: &GroupVersionKind) -> Result<(), CallError> {
        if self.shared.grants.can_read(kind) {
            Ok(())
        } else {
            Err(CallError::Forbidden(format!(
                "plugin `{}` may not read {}: register the kind (for/owns/watches/reads) and have it granted",
                self.shared.name,
                crate::plugin::grants::KindRef::of(kind)
            )))
        }
    }

    /// Counts the call and converts its result to the WIT error.
    pub(crate) fn finish<T>(&self, function: &'static str, result: Result<T, CallError>) -> Result<T, types::Error> {
        let label = result.as_ref().map_or_else(CallError::metric_label, |_| "ok");
        self.count(function, label);
        result.map_err(Into::into)
    }
}

impl cache::Host for PluginCtx {
    async fn get(&mut self, kind: types::Gvk, namespace: Option<String>, name: String) -> CallResult<Option<Vec<u8>>> {
        self.charge()?;
        let kind = kind.into();
        let result = self.check_read(&kind).and_then(|()| self.shared.cache.get(&kind, namespace.as_deref(), &name));
        Ok(self.finish("cache.get", result))
    }

    async fn list(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> CallResult<Vec<Vec<u8>>> {
        self.charge()?;
        let kind = kind.into();
        let result = self
            .check_read(&kind)
            .and_then(|()| self.shared.cache.list(&kind, namespace.as_deref(), label_selector.as_deref()));
        Ok(self.finish("cache.list", result))
    }

    async fn by_index(&mut self, kind: types::Gvk, index: String, value: String) -> CallResult<Vec<Vec<u8>>> {
        self.charge()?;
        let kind = kind.into();
        let result = self.check_read(&kind).and_then(|()| self.shared.cache.by_index(&kind, &index, &value));
        Ok(self.finish("cache.by-index", result))
    }
}

impl types::Host for PluginCtx {}
