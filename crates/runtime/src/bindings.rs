//! The `kubewasm:controller` worlds (0.1.0, 0.2.0, 0.3.0): one module per contract version holds its
//! bindings generated from `wit/`, the conversions of its types and its imports as calls of the
//! host functions (`crate::host`, written once for every version); this file picks the world a
//! component implements and pre-links it. A new contract version is one more module here. The
//! engine world (`engine_v0_1`) is the 0.3.0 world plus the export a language engine takes a
//! source plugin through.

use std::sync::Arc;

use kube::core::GroupVersionKind;
use kubewasm_informer::{InvalidKey, ObjectKey};

use super::outcome::{Action, CallFailed};
use super::registration::Registration;
use super::snapshot;
use super::state::PluginCtx;

/// What every contract version's module has alike: the `events`, `config`, `log` and `types`
/// imports as calls of the host functions, and the conversions of its kinds and errors. Invoked
/// inside a version's module, where `types`, `events`, `config` and `log` are its generated
/// interfaces; a version that changes one of them writes that part itself instead.
macro_rules! same_in_every_version {
    () => {
        impl events::Host for PluginCtx {
            async fn publish(
                &mut self,
                regarding: types::ObjectRef,
                event_type: events::EventType,
                reason: String,
                note: String,
            ) -> wasmtime::Result<Result<(), types::Error>> {
                let (namespace, name) = (regarding.key.namespace, regarding.key.name);
                let regarding = crate::api::ObjectRef { kind: regarding.kind.into(), namespace, name };
                let warning = matches!(event_type, events::EventType::Warning);
                self.events_publish(regarding, warning, reason, note).await
            }
        }

        impl config::Host for PluginCtx {
            async fn settings(&mut self) -> wasmtime::Result<Vec<u8>> {
                self.config_settings()
            }
        }

        impl log::Host for PluginCtx {
            async fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
                let level = match level {
                    log::Level::Trace => tracing::Level::TRACE,
                    log::Level::Debug => tracing::Level::DEBUG,
                    log::Level::Info => tracing::Level::INFO,
                    log::Level::Warn => tracing::Level::WARN,
                    log::Level::Error => tracing::Level::ERROR,
                };
                self.log_line(level, message)
            }
        }

        impl types::Host for PluginCtx {}

        impl From<types::Gvk> for kube::core::GroupVersionKind {
            fn from(g: types::Gvk) -> Self {
                kube::core::GroupVersionKind::gvk(&g.group, &g.version, &g.kind)
            }
        }

        impl From<&kube::core::GroupVersionKind> for types::Gvk {
            fn from(g: &kube::core::GroupVersionKind) -> Self {
                types::Gvk { group: g.group.clone(), version: g.version.clone(), kind: g.kind.clone() }
            }
        }

        impl From<crate::api::CallError> for types::Error {
            fn from(e: crate::api::CallError) -> Self {
                use crate::api::CallError;
                match e {
                    CallError::NotFound => Self::NotFound,
                    CallError::Forbidden(m) => Self::Forbidden(m),
                    CallError::Conflict(m) => Self::Conflict(m),
                    CallError::Invalid(m) => Self::Invalid(m),
                    CallError::Unavailable(m) => Self::Unavailable(m),
                    CallError::Other(m) => Self::Other(m),
                }
            }
        }
    };
}
use same_in_every_version;

pub mod engine_v0_1;
pub mod v0_1;
pub mod v0_2;
pub mod v0_3;

/// Which contract version a component implements, read once from its imports at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Contract {
    /// `kubewasm:controller/controller@0.1.0`.
    V0_1,
    /// `kubewasm:controller/controller@0.2.0`.
    V0_2,
    /// `kubewasm:controller/controller@0.3.0`.
    V0_3,
}

impl Contract {
    /// The world's full name.
    pub fn world(self) -> &'static str {
        match self {
            Contract::V0_1 => "kubewasm:controller/controller@0.1.0",
            Contract::V0_2 => "kubewasm:controller/controller@0.2.0",
            Contract::V0_3 => "kubewasm:controller/controller@0.3.0",
        }
    }

    /// The contract of a component: the newest version whose `kubewasm:controller/*`
    /// interfaces it imports (every component imports at least `types`, which its exports
    /// use), else 0.1. A component mixing versions fails to link against the world picked, with
    /// wasmtime's message.
    pub fn of(component: &wasmtime::component::Component, engine: &wasmtime::Engine) -> Self {
        let imports = component.component_type();
        let versions: Vec<_> = imports
            .imports(engine)
            .filter_map(|(name, _)| name.strip_prefix("kubewasm:controller/"))
            .filter_map(|name| name.rsplit_once('@').map(|(_, version)| version.to_owned()))
            .collect();
        let imports_version = |v: &str| versions.iter().any(|version| version == v);
        if imports_version("0.3.0") {
            Contract::V0_3
        } else if imports_version("0.2.0") {
            Contract::V0_2
        } else {
            Contract::V0_1
        }
    }
}

/// A component pre-linked against the world it implements; the world is picked at load, so a
/// call pays one enum match, not a lookup.
pub enum PluginPre {
    /// A 0.1.0 component.
    V0_1(v0_1::ControllerPre<PluginCtx>),
    /// A 0.2.0 component.
    V0_2(v0_2::ControllerPre<PluginCtx>),
    /// A 0.3.0 component.
    V0_3(v0_3::ControllerPre<PluginCtx>),
    /// A language engine, bare: its instances have no plugin loaded (a source plugin's load
    /// compiles its source in one). Shared by every source plugin of its language. With the
    /// exports a snapshot is read and written through, when the engine is instrumented for them.
    Engine(engine_v0_1::EnginePre<PluginCtx>, Option<Arc<snapshot::Exports>>),
    /// A source plugin: its engine, each instance of which starts from the plugin's snapshot
    /// (or imports the plugin's code first, when it has none).
    Source(SourcePre),
}

/// A source plugin's code on its engine.
pub struct SourcePre {
    /// The engine, a [`PluginPre::Engine`], shared with the other plugins of its language.
    pub(crate) engine: Arc<PluginPre>,
    /// What the engine's `compile` made of the plugin's files.
    pub(crate) code: Arc<[engine_v0_1::File]>,
    /// The module to import.
    pub(crate) entry: Arc<str>,
    /// The plugin's state after its import, written into each fresh instance instead of
    /// importing it; `None`: each instance imports it.
    pub(crate) snapshot: Option<Arc<snapshot::Restore>>,
}

/// An instance of a plugin, of the world its component implements.
pub enum PluginInstance {
    /// A 0.1.0 instance.
    V0_1(v0_1::Controller),
    /// A 0.2.0 instance.
    V0_2(v0_2::Controller),
    /// A 0.3.0 instance.
    V0_3(v0_3::Controller),
    /// An engine's instance (with a source plugin loaded, except at load).
    Source(engine_v0_1::Engine),
}

impl PluginPre {
    /// Checks `pre`'s exports against `contract`'s world.
    pub fn new(contract: Contract, pre: wasmtime::component::InstancePre<PluginCtx>) -> wasmtime::Result<Self> {
        Ok(match contract {
            Contract::V0_1 => PluginPre::V0_1(v0_1::ControllerPre::new(pre)?),
            Contract::V0_2 => PluginPre::V0_2(v0_2::ControllerPre::new(pre)?),
            Contract::V0_3 => PluginPre::V0_3(v0_3::ControllerPre::new(pre)?),
        })
    }

    /// Checks `pre`'s exports against the engine world.
    pub fn engine(pre: wasmtime::component::InstancePre<PluginCtx>) -> wasmtime::Result<Self> {
        let exports = snapshot::Exports::of(pre.component()).map(Arc::new);
        Ok(PluginPre::Engine(engine_v0_1::EnginePre::new(pre)?, exports))
    }

    /// The contract version.
    pub fn contract(&self) -> Contract {
        match self {
            PluginPre::V0_1(_) => Contract::V0_1,
            PluginPre::V0_2(_) => Contract::V0_2,
            PluginPre::V0_3(_) | PluginPre::Engine(..) | PluginPre::Source(_) => Contract::V0_3,
        }
    }

    /// The pre-linked component.
    pub fn instance_pre(&self) -> &wasmtime::component::InstancePre<PluginCtx> {
        match self {
            PluginPre::V0_1(p) => p.instance_pre(),
            PluginPre::V0_2(p) => p.instance_pre(),
            PluginPre::V0_3(p) => p.instance_pre(),
            PluginPre::Engine(p, _) => p.instance_pre(),
            PluginPre::Source(p) => p.engine.instance_pre(),
        }
    }

    /// A new instance in `store`.
    /// A source plugin's instance has its code loaded, within the limits armed on `store`.
    pub async fn instantiate_async(&self, store: &mut wasmtime::Store<PluginCtx>) -> wasmtime::Result<PluginInstance> {
        Ok(match self {
            PluginPre::V0_1(p) => PluginInstance::V0_1(p.instantiate_async(store).await?),
            PluginPre::V0_2(p) => PluginInstance::V0_2(p.instantiate_async(store).await?),
            PluginPre::V0_3(p) => PluginInstance::V0_3(p.instantiate_async(store).await?),
            PluginPre::Engine(p, _) => PluginInstance::Source(p.instantiate_async(store).await?),
            PluginPre::Source(p) => {
                let PluginPre::Engine(engine, _) = &*p.engine else {
                    return Err(wasmtime::Error::msg("a source plugin's engine is not an engine component"));
                };
                if let Some(restore) = &p.snapshot {
                    let raw = engine.instance_pre().instantiate_async(&mut *store).await?;
                    restore.snapshot.restore(&restore.exports, &raw, store).await?;
                    return Ok(PluginInstance::Source(engine_v0_1::Engine::new(store, &raw)?));
                }
                let instance = engine.instantiate_async(&mut *store).await?;
                engine_v0_1::load(&instance, store, &p.code, &p.entry).await?;
                PluginInstance::Source(instance)
            }
        })
    }
}

/// Adds every world's imports to `linker`: their interfaces are versioned, so they do not clash.
pub fn add_to_linker(linker: &mut wasmtime::component::Linker<PluginCtx>) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    v0_1::Controller::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    v0_2::Controller::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    v0_3::Controller::add_to_linker::<_, HasSelf<_>>(linker, |s| s)
}

impl PluginInstance {
    /// Calls `reconcile` for `key` of `registration`'s for kind, in the instance's world (and,
    /// from 0.3, makes the desired state it returns so).
    pub(crate) async fn reconcile(
        &self,
        store: &mut wasmtime::Store<PluginCtx>,
        registration: &Registration,
        key: ObjectKey,
        attempt: u32,
    ) -> wasmtime::Result<Result<Action, CallFailed>> {
        match self {
            PluginInstance::V0_1(inst) => v0_1::reconcile(inst, store, &registration.for_kind, key, attempt).await,
            PluginInstance::V0_2(inst) => v0_2::reconcile(inst, store, registration, key, attempt).await,
            PluginInstance::V0_3(inst) => v0_3::reconcile(inst, store, registration, key, attempt).await,
            PluginInstance::Source(inst) => engine_v0_1::reconcile(inst, store, registration, key, attempt).await,
        }
    }

    /// Calls `map` for `object` (JSON) of `kind`: the keys it names, each checked.
    pub(crate) async fn map(
        &self,
        store: &mut wasmtime::Store<PluginCtx>,
        kind: &GroupVersionKind,
        object: &[u8],
    ) -> wasmtime::Result<Result<Vec<Result<ObjectKey, InvalidKey>>, CallFailed>> {
        match self {
            PluginInstance::V0_1(inst) => v0_1::map(inst, store, kind, object).await,
            PluginInstance::V0_2(inst) => v0_2::map(inst, store, kind, object).await,
            PluginInstance::V0_3(inst) => v0_3::map(inst, store, kind, object).await,
            PluginInstance::Source(inst) => engine_v0_1::map(inst, store, kind, object).await,
        }
    }

    /// Calls `describe`: what the plugin asks of the host.
    pub(crate) async fn describe(&self, store: &mut wasmtime::Store<PluginCtx>) -> wasmtime::Result<Registration> {
        match self {
            PluginInstance::V0_1(inst) => v0_1::describe(inst, store).await,
            PluginInstance::V0_2(inst) => v0_2::describe(inst, store).await,
            PluginInstance::V0_3(inst) => v0_3::describe(inst, store).await,
            PluginInstance::Source(inst) => engine_v0_1::describe(inst, store).await,
        }
    }
}
