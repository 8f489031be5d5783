//! Rust bindings of the `kubewasm:controller@0.1.0` world, generated from `wit/`.

// Generated code carries the WIT's doc comments where bindgen copies them; the WIT file is the
// reference for the rest.
#[allow(missing_docs)]
mod generated {
    wasmtime::component::bindgen!({
        world: "controller",
        path: "../wit/controller@0.1.0",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

pub use generated::kubewasm::controller::{cache, client, config, events, log, types};
pub use generated::{Action, Controller, ControllerPre, Index, IndexSource, Registration, Request, Watch};

use kube::core::GroupVersionKind;

impl From<types::Gvk> for GroupVersionKind {
    fn from(g: types::Gvk) -> Self {
        GroupVersionKind::gvk(&g.group, &g.version, &g.kind)
    }
}

impl From<&GroupVersionKind> for types::Gvk {
    fn from(g: &GroupVersionKind) -> Self {
        types::Gvk { group: g.group.clone(), version: g.version.clone(), kind: g.kind.clone() }
    }
}
