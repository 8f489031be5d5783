//! A source plugin's state after its import, taken once per version and restored into each fresh
//! engine instance instead of importing the plugin again.
//!
//! The engine component is instrumented (`snapshot/restorer.rs`) so the host can read and set
//! every core memory and global. At load, the host imports the plugin in one fresh instance and
//! keeps what differs from a fresh instance: the 4 KiB pages the import wrote, the memories'
//! sizes and the globals. Each fresh instance then has those pages written in place: its
//! interpreter's memory is the one the import left, without running the import. What the
//! instance shares with the others is unchanged: the engine's compiled code and its
//! copy-on-write memory image.
//!
//! The state is only memories and globals. A snapshot is not taken (and the plugin is imported
//! in every instance, as before) when the import leaves the instance holding a host resource,
//! when its pages exceed [`MAX_BYTES`], or when an instance restored from it differs from the
//! imported one.

mod restorer;

use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::{ComponentExportIndex, Instance, WasmList, types::ComponentItem};

use crate::state::PluginCtx;
pub(crate) use restorer::instrument;
use restorer::{BEGIN, LISTS, WRITE};

/// The most bytes of pages a plugin's snapshot may hold; the host keeps them for as long as the
/// version serves. An import that writes more is run in each instance instead. 16 MiB.
pub const MAX_BYTES: usize = 16 << 20;

/// The unit a snapshot is taken and written in.
const PAGE: usize = 4096;

/// A wasm memory page.
const WASM_PAGE: usize = 65536;

/// One memory's or global's value, read through wizer's accessors: a memory as it is in its
/// instance, not copied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value<'a> {
    /// A memory's bytes.
    Memory(&'a [u8]),
    /// A global's bits.
    Global(u64),
}

/// A [`Value`] as read, its memory still in its store.
pub(crate) enum Read {
    Memory(WasmList<u8>),
    Global(u64),
}

/// The values of `reads`, made in `store`.
pub(crate) fn values<'a>(reads: &'a [Read], store: &'a Store<PluginCtx>) -> Vec<Value<'a>> {
    reads
        .iter()
        .map(|read| match read {
            Read::Memory(list) => Value::Memory(list.as_le_slice(store)),
            Read::Global(bits) => Value::Global(*bits),
        })
        .collect()
}

/// What an engine instrumented for snapshots exports: wizer's accessors in order, and the
/// restorer's functions.
#[derive(Debug)]
pub struct Exports {
    accessors: Vec<(ComponentExportIndex, Accessor)>,
    begin: ComponentExportIndex,
    writes: Vec<ComponentExportIndex>,
}

/// How an accessor's value is read.
#[derive(Debug, Clone, Copy)]
enum Accessor {
    Memory,
    S32,
    S64,
    F32,
    F64,
}

impl Exports {
    /// The exports of `component`, instrumented by [`instrument`]; `None` when they are not
    /// all there.
    pub(crate) fn of(component: &wasmtime::component::Component) -> Option<Self> {
        let access = component.get_export_index(None, "wasmtime:wizer/access")?;
        let mut accessors = Vec::new();
        // wizer names its accessors `memory{i}` and `global{i}`, `i` counting both.
        for i in 0.. {
            let found = component.get_export(Some(&access), format!("memory{i}")).map(|(_, e)| (e, Accessor::Memory));
            let found = found.or_else(|| {
                let (item, export) = component.get_export(Some(&access), format!("global{i}"))?;
                let ComponentItem::ComponentFunc(f) = item else { return None };
                let accessor = match f.results().next()? {
                    wasmtime::component::Type::S32 => Accessor::S32,
                    wasmtime::component::Type::S64 => Accessor::S64,
                    wasmtime::component::Type::Float32 => Accessor::F32,
                    wasmtime::component::Type::Float64 => Accessor::F64,
                    _ => return None,
                };
                Some((export, accessor))
            });
            match found {
                Some(accessor) => accessors.push(accessor),
                None => break,
            }
        }
        let memories = accessors.iter().filter(|a| matches!(a.1, Accessor::Memory)).count();
        let writes = (0..memories)
            .map(|m| component.get_export_index(None, format!("{WRITE}{m}")))
            .collect::<Option<Vec<_>>>()?;
        Some(Exports { accessors, begin: component.get_export_index(None, BEGIN)?, writes })
    }

    /// Every memory's and global's value in `instance`, in the accessors' order. (Reading a
    /// memory grows it by a page, past the bytes read.)
    pub(crate) async fn read(&self, instance: &Instance, store: &mut Store<PluginCtx>) -> wasmtime::Result<Vec<Read>> {
        let mut values = Vec::with_capacity(self.accessors.len());
        for (export, accessor) in &self.accessors {
            let value = match accessor {
                Accessor::Memory => {
                    let f = instance.get_typed_func::<(), (WasmList<u8>,)>(&mut *store, *export)?;
                    Read::Memory(f.call_async(&mut *store, ()).await?.0)
                }
                Accessor::S32 => Read::Global(u64::from(read::<i32>(instance, store, export).await?.cast_unsigned())),
                Accessor::S64 => Read::Global(read::<i64>(instance, store, export).await?.cast_unsigned()),
                Accessor::F32 => Read::Global(u64::from(read::<f32>(instance, store, export).await?.to_bits())),
                Accessor::F64 => Read::Global(read::<f64>(instance, store, export).await?.to_bits()),
            };
            values.push(value);
        }
        Ok(values)
    }
}

/// Calls the getter `export`.
async fn read<T>(
    instance: &Instance,
    store: &mut Store<PluginCtx>,
    export: &ComponentExportIndex,
) -> wasmtime::Result<T>
where
    T: wasmtime::component::ComponentType + wasmtime::component::Lift + Send + Sync + 'static,
{
    let f = instance.get_typed_func::<(), (T,)>(&mut *store, *export)?;
    let (value,) = f.call_async(&mut *store, ()).await?;
    Ok(value)
}

/// A plugin's state after its import, as written into a fresh instance.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    /// `begin`'s argument: each memory's size in wasm pages, each global's bits, each run's
    /// address.
    head: Vec<u8>,
    /// The runs of pages the import wrote, as (memory, bytes), in the order of their addresses
    /// in `head`.
    runs: Vec<(u32, Vec<u8>)>,
}

/// Why there is no snapshot.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Refused {
    /// The pages the import wrote are more than [`MAX_BYTES`].
    #[error("the plugin's import wrote {0} bytes of pages, more than the {MAX_BYTES} a snapshot may hold")]
    TooLarge(usize),
    /// The import left a memory smaller than a fresh instance's, or the two reads differ in shape.
    #[error("the instance's state after import does not match a fresh instance's in shape")]
    Shape,
    /// The import left the instance holding a host resource, which a snapshot cannot carry.
    #[error("the plugin's import left its instance holding a host resource")]
    Resources,
    /// An instance the snapshot was written into does not read back as the imported one.
    #[error("an instance restored from the snapshot differs from the imported one")]
    Differs,
}

impl Snapshot {
    /// What takes an instance in state `fresh` to `loaded` (the [`values`] of two reads).
    pub(crate) fn diff(fresh: &[Value<'_>], loaded: &[Value<'_>], max_bytes: usize) -> Result<Self, Refused> {
        if fresh.len() != loaded.len() {
            return Err(Refused::Shape);
        }
        let (mut sizes, mut globals, mut addresses, mut runs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut bytes = 0;
        let mut memory = 0u32;
        for (before, after) in fresh.iter().zip(loaded) {
            match (before, after) {
                (Value::Global(_), Value::Global(bits)) => globals.extend_from_slice(&bits.to_le_bytes()),
                (Value::Memory(before), Value::Memory(after)) => {
                    if after.len() < before.len() || after.len() % WASM_PAGE != 0 {
                        return Err(Refused::Shape);
                    }
                    sizes.extend_from_slice(&((after.len() / WASM_PAGE) as u32).to_le_bytes());
                    let pages = after.len() / PAGE;
                    let written = |p: usize| {
                        let page = &after[p * PAGE..(p + 1) * PAGE];
                        before.get(p * PAGE..(p + 1) * PAGE).map_or(page.iter().any(|&b| b != 0), |was| was != page)
                    };
                    let mut p = 0;
                    while p < pages {
                        if !written(p) {
                            p += 1;
                            continue;
                        }
                        let start = p;
                        while p < pages && written(p) {
                            p += 1;
                        }
                        bytes += (p - start) * PAGE;
                        if bytes > max_bytes {
                            return Err(Refused::TooLarge(bytes));
                        }
                        addresses.extend_from_slice(&((start * PAGE) as u32).to_le_bytes());
                        runs.push((memory, after[start * PAGE..p * PAGE].to_vec()));
                    }
                    memory += 1;
                }
                _ => return Err(Refused::Shape),
            }
        }
        let head = [sizes, globals, addresses].concat();
        Ok(Snapshot { head, runs })
    }

    /// The bytes of pages it holds, and in how many runs.
    pub fn size(&self) -> (usize, usize) {
        (self.runs.iter().map(|r| r.1.len()).sum(), self.runs.len())
    }

    /// Writes the snapshot into `instance`, fresh: [`LISTS`] runs of a memory per call.
    pub(crate) async fn restore(
        &self,
        exports: &Exports,
        instance: &Instance,
        store: &mut Store<PluginCtx>,
    ) -> wasmtime::Result<()> {
        let begin = instance.get_typed_func::<(&[u8],), ()>(&mut *store, exports.begin)?;
        begin.call_async(&mut *store, (&self.head,)).await?;
        type Runs<'a> = (&'a [u8], &'a [u8], &'a [u8], &'a [u8], &'a [u8], &'a [u8], &'a [u8], &'a [u8]);
        let mut rest = self.runs.as_slice();
        while let Some((memory, _)) = rest.first() {
            let n = rest.iter().take(LISTS).take_while(|r| r.0 == *memory).count();
            let mut lists: [&[u8]; LISTS] = [&[]; LISTS];
            for (list, run) in lists.iter_mut().zip(&rest[..n]) {
                *list = &run.1;
            }
            let export = exports.writes.get(*memory as usize).ok_or_else(|| wasmtime::Error::msg("no such memory"))?;
            let write = instance.get_typed_func::<Runs<'_>, ()>(&mut *store, *export)?;
            let [a, b, c, d, e, f, g, h] = lists;
            write.call_async(&mut *store, (a, b, c, d, e, f, g, h)).await?;
            rest = &rest[n..];
        }
        Ok(())
    }
}

/// A source plugin's snapshot with the exports it is written through.
pub struct Restore {
    pub(crate) exports: Arc<Exports>,
    pub(crate) snapshot: Snapshot,
}

#[cfg(test)]
mod tests;
