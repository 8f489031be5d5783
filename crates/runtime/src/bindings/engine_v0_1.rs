//! The engine world (`kubewasm:engine/engine@0.1.0`): the 0.3.0 controller world plus the
//! `source` export a language engine takes a plugin's source through. Its imports are 0.3's
//! own interfaces (`with:`), so the host functions, grants and limits are theirs; its exports'
//! types are generated again and converted by `v0_3`'s `since_0_3_exports!`.

use wasmtime::Store;

use crate::registration;
use crate::source::SourceFile;
use crate::state::PluginCtx;

// As for 0.1: the WIT file is the reference for the docs bindgen does not copy.
#[allow(missing_docs)]
mod generated {
    wasmtime::component::bindgen!({
        world: "engine",
        path: "../../wit/engine@0.1.0",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "kubewasm:controller/types": crate::bindings::v0_3::types,
            "kubewasm:controller/cache": crate::bindings::v0_3::cache,
            "kubewasm:controller/client": crate::bindings::v0_3::client,
            "kubewasm:controller/events": crate::bindings::v0_3::events,
            "kubewasm:controller/log": crate::bindings::v0_3::log,
            "kubewasm:controller/config": crate::bindings::v0_3::config,
        },
    });
}

pub use generated::exports::kubewasm::engine::source::{File, Location, SourceError};
pub use generated::{Engine, EnginePre};
use generated::{EventFilter, IndexSource, Owned, Predicates, Prune, ReconcileError, Registration, Request};
// The names `since_0_3_exports!` calls the instance and the interfaces by.
use crate::bindings::v0_3::types;
use generated::Engine as Controller;

/// Compiles `files` to the engine's code form, imports `entry` from it and calls `describe`, in
/// one bare engine instance: what loading a source plugin's version checks. The first result is
/// the plugin's source error, if it has one.
pub(crate) async fn compile_load_describe(
    engine: &Engine,
    store: &mut Store<PluginCtx>,
    files: &[SourceFile],
    entry: &str,
) -> wasmtime::Result<Result<(Vec<File>, registration::Registration), SourceError>> {
    let files: Vec<File> = files.iter().map(|f| File { path: f.path.clone(), contents: f.contents.clone() }).collect();
    let source = engine.kubewasm_engine_source();
    let code = match source.call_compile(&mut *store, &files).await? {
        Ok(code) => code,
        Err(e) => return Ok(Err(e)),
    };
    if let Err(e) = source.call_load(&mut *store, &code, entry).await? {
        return Ok(Err(e));
    }
    Ok(Ok((code, describe(engine, store).await?)))
}

/// Imports `entry` from `code` (what `compile` made) into a fresh engine instance; a source error
/// (the version loaded once, so something at its top level differs between instances) fails
/// the call.
pub(crate) async fn load(
    engine: &Engine,
    store: &mut Store<PluginCtx>,
    code: &[File],
    entry: &str,
) -> wasmtime::Result<()> {
    match engine.kubewasm_engine_source().call_load(store, code, entry).await? {
        Ok(()) => Ok(()),
        Err(e) => Err(wasmtime::Error::msg(format!("the plugin's source did not load: {}", describe_error(&e)))),
    }
}

/// `file:line:column: message`, the way compilers say it (the place left out when unknown).
pub(crate) fn describe_error(e: &SourceError) -> String {
    match &e.location {
        Some(l) if l.column > 0 => format!("{}:{}:{}: {}", l.file, l.line, l.column, e.message),
        Some(l) => format!("{}:{}: {}", l.file, l.line, e.message),
        None => e.message.clone(),
    }
}

// reconcile, map and describe as a 0.3 component has them, on the engine's instance.
super::v0_3::since_0_3_exports!();
