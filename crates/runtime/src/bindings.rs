//! Rust bindings of the `kubewasm:controller` worlds (0.1.0 and 0.2.0), generated from `wit/`,
//! the pre-linked component / instance of whichever world a plugin implements, and (in
//! `convert`) every conversion between their types and the host's.

use super::state::PluginCtx;

mod convert;

/// The 0.1.0 world, frozen: what every plugin built before 0.2 implements.
pub mod v0_1 {
    // Generated code carries the WIT's doc comments where bindgen copies them; the WIT file is
    // the reference for the rest.
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
    pub use generated::{Action, Controller, ControllerPre, Index, IndexSource, Registration, Request, Watch};
}

/// The 0.2.0 world: fallible `map`, reconcile errors with a retry policy, paged cached lists,
/// preconditions, status patches, uncached reads, per-use event filters.
pub mod v0_2 {
    // As for v0_1: the WIT file is the reference for the docs bindgen does not copy.
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
        Action, Controller, ControllerPre, EventFilter, Index, IndexSource, Owned, Predicates, ReconcileError,
        Registration, Request, Requeue, Watch,
    };
}

// The 0.1 names stay the default ones: most host code predates 0.2.
pub use v0_1::{cache, client, config, events, log, types};

/// Which contract version a component implements, read once from its imports at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Contract {
    /// `kubewasm:controller/controller@0.1.0`.
    V0_1,
    /// `kubewasm:controller/controller@0.2.0`.
    V0_2,
}

impl Contract {
    /// The world's full name.
    pub fn world(self) -> &'static str {
        match self {
            Contract::V0_1 => "kubewasm:controller/controller@0.1.0",
            Contract::V0_2 => "kubewasm:controller/controller@0.2.0",
        }
    }

    /// The contract of a component: 0.2 if it imports any `kubewasm:controller/*@0.2.0`
    /// interface (every 0.2 component imports at least `types`, which its exports use), else
    /// 0.1. A component mixing both fails to link against either world, with wasmtime's
    /// message.
    pub fn of(component: &wasmtime::component::Component, engine: &wasmtime::Engine) -> Self {
        let imports = component.component_type();
        let v0_2 = imports
            .imports(engine)
            .any(|(name, _)| name.starts_with("kubewasm:controller/") && name.ends_with("@0.2.0"));
        if v0_2 { Contract::V0_2 } else { Contract::V0_1 }
    }
}

/// A component pre-linked against the world it implements; the world is picked at load, so a
/// call pays one enum match, not a lookup.
pub enum PluginPre {
    /// A 0.1.0 component.
    V0_1(v0_1::ControllerPre<PluginCtx>),
    /// A 0.2.0 component.
    V0_2(v0_2::ControllerPre<PluginCtx>),
}

/// An instance of a plugin, of the world its component implements.
pub enum PluginInstance {
    /// A 0.1.0 instance.
    V0_1(v0_1::Controller),
    /// A 0.2.0 instance.
    V0_2(v0_2::Controller),
}

impl PluginPre {
    /// Checks `pre`'s exports against `contract`'s world.
    pub fn new(contract: Contract, pre: wasmtime::component::InstancePre<PluginCtx>) -> wasmtime::Result<Self> {
        Ok(match contract {
            Contract::V0_1 => PluginPre::V0_1(v0_1::ControllerPre::new(pre)?),
            Contract::V0_2 => PluginPre::V0_2(v0_2::ControllerPre::new(pre)?),
        })
    }

    /// The contract version.
    pub fn contract(&self) -> Contract {
        match self {
            PluginPre::V0_1(_) => Contract::V0_1,
            PluginPre::V0_2(_) => Contract::V0_2,
        }
    }

    /// The pre-linked component.
    pub fn instance_pre(&self) -> &wasmtime::component::InstancePre<PluginCtx> {
        match self {
            PluginPre::V0_1(p) => p.instance_pre(),
            PluginPre::V0_2(p) => p.instance_pre(),
        }
    }

    /// A new instance in `store`.
    pub async fn instantiate_async(&self, store: &mut wasmtime::Store<PluginCtx>) -> wasmtime::Result<PluginInstance> {
        Ok(match self {
            PluginPre::V0_1(p) => PluginInstance::V0_1(p.instantiate_async(store).await?),
            PluginPre::V0_2(p) => PluginInstance::V0_2(p.instantiate_async(store).await?),
        })
    }
}

/// Adds both worlds' imports to `linker`: their interfaces are versioned, so they do not clash.
pub fn add_to_linker(linker: &mut wasmtime::component::Linker<PluginCtx>) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    v0_1::Controller::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    v0_2::Controller::add_to_linker::<_, HasSelf<_>>(linker, |s| s)
}
