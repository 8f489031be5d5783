//! The restorer an engine is instrumented with: wasmtime-wizer's getters of every core memory
//! and global (`wasmtime:wizer/access`), plus a core module of our own, lifted as
//! [`BEGIN`] and [`WRITE`]`{m}`, that sets them. Hand-written: wizer snapshots a component into a
//! new component, to compile again, and has no way to set state in a running instance.
//!
//! The restorer imports what wizer's accessor module imports (each instrumented core instance's
//! memories and globals, in the accessors' order) and defines a scratch memory of its own.
//! - `begin(state: list<u8>)` is lowered into the scratch memory: each memory's size in 64 KiB
//!   pages (u32), each global's value (8 bytes), then the address of every run (u32). It grows
//!   the memories, sets the globals, and points a cursor at the addresses.
//! - `write{m}(run0 … run7: list<u8>)` has memory `m` as its canonical memory and a `realloc`
//!   that hands out the next address under the cursor: each run is lowered straight into its
//!   place, once, and the function itself does nothing. (The canonical ABI lowers parameters in
//!   order and calls `realloc` once per non-empty list.)

use wasm_encoder::{
    Alias, BlockType, CanonicalFunctionSection, CanonicalOption, CodeSection, Component, ComponentAliasSection,
    ComponentExportKind, ComponentExportSection, ComponentTypeSection, ComponentValType, ConstExpr, ExportKind,
    ExportSection, Function, FunctionSection, GlobalSection, GlobalType, ImportSection, InstanceSection, MemArg,
    MemorySection, MemoryType, Module, ModuleArg, ModuleSection, PrimitiveValType, TypeSection, ValType,
};
use wasmparser::{
    ComponentAlias, ComponentExternalKind, ComponentOuterAliasKind, ExternalKind, Parser, Payload, TypeRef,
};

/// The export that sizes the memories, sets the globals and queues the runs' addresses.
pub(crate) const BEGIN: &str = "kubewasm-restore-begin";
/// The exports (`{WRITE}{m}`) that lower up to [`LISTS`] runs of memory `m` in place.
pub(crate) const WRITE: &str = "kubewasm-restore-write";
/// Runs per write call: eight lists are sixteen flat parameters, the most passed without memory.
pub(crate) const LISTS: usize = 8;

/// What the restorer sets, in the order of wizer's accessors.
#[derive(Debug, Default, PartialEq)]
struct Layout {
    /// Each global: its type and whether it is mutable (an immutable one is never set).
    globals: Vec<(ValType, bool)>,
    /// How many memories.
    memories: u32,
}

/// The component's index spaces, and what the last core module and instance (wizer's accessor
/// module and its instance) import and are instantiated with.
#[derive(Debug, Default)]
struct Counts {
    core_modules: u32,
    core_instances: u32,
    core_funcs: u32,
    core_memories: u32,
    types: u32,
    funcs: u32,
    last_args: Vec<(String, u32)>,
    last_imports: Vec<(String, String, TypeRef)>,
}

/// `engine` instrumented with wizer's getters and the restorer's setters.
pub(crate) fn instrument(engine: &[u8]) -> wasmtime::Result<Vec<u8>> {
    let (_, mut wasm) = wasmtime_wizer::Wizer::new().instrument_component(engine)?;
    let counts = count(&wasm)?;
    let (imports, layout) = imports(&counts)?;
    let restorer = restorer(imports, &layout);
    wasm.extend_from_slice(&lifted(&counts, &restorer, layout.memories).finish()[8..]);
    Ok(wasm)
}

/// Counts the top level's index spaces (nested modules and components are skipped).
fn count(wasm: &[u8]) -> wasmtime::Result<Counts> {
    let mut c = Counts::default();
    let mut depth = 0u32;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload? {
            Payload::ModuleSection { .. } => {
                if depth == 0 {
                    c.core_modules += 1;
                    c.last_imports.clear();
                }
                depth += 1;
            }
            Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ImportSection(s) if depth == 1 => {
                for imports in s {
                    for import in imports? {
                        let (_, import) = import?;
                        c.last_imports.push((import.module.to_owned(), import.name.to_owned(), import.ty));
                    }
                }
            }
            _ if depth > 0 => {}
            Payload::InstanceSection(s) => {
                for instance in s {
                    c.core_instances += 1;
                    if let wasmparser::Instance::Instantiate { args, .. } = instance? {
                        c.last_args = args.iter().map(|a| (a.name.to_owned(), a.index)).collect();
                    }
                }
            }
            Payload::ComponentAliasSection(s) => {
                for alias in s {
                    match alias? {
                        ComponentAlias::InstanceExport { kind, .. } => c.bump(kind),
                        ComponentAlias::CoreInstanceExport { kind, .. } => c.bump_core(kind),
                        ComponentAlias::Outer { kind: ComponentOuterAliasKind::Type, .. } => c.types += 1,
                        ComponentAlias::Outer { kind: ComponentOuterAliasKind::CoreModule, .. } => c.core_modules += 1,
                        ComponentAlias::Outer { .. } => {}
                    }
                }
            }
            Payload::ComponentTypeSection(s) => c.types += s.count(),
            Payload::ComponentCanonicalSection(s) => {
                for canon in s {
                    match canon? {
                        wasmparser::CanonicalFunction::Lift { .. } => c.funcs += 1,
                        _ => c.core_funcs += 1,
                    }
                }
            }
            Payload::ComponentImportSection(s) => {
                for import in s {
                    match import?.ty {
                        wasmparser::ComponentTypeRef::Func(_) => c.funcs += 1,
                        wasmparser::ComponentTypeRef::Type(_) => c.types += 1,
                        wasmparser::ComponentTypeRef::Module(_) => c.core_modules += 1,
                        _ => {}
                    }
                }
            }
            Payload::ComponentExportSection(s) => {
                for export in s {
                    c.bump(export?.kind);
                }
            }
            _ => {}
        }
    }
    if c.last_args.is_empty() || c.last_imports.is_empty() {
        wasmtime::bail!("wizer's accessor module was not found in the instrumented engine");
    }
    Ok(c)
}

impl Counts {
    fn bump(&mut self, kind: ComponentExternalKind) {
        match kind {
            ComponentExternalKind::Func => self.funcs += 1,
            ComponentExternalKind::Type => self.types += 1,
            ComponentExternalKind::Module => self.core_modules += 1,
            _ => {}
        }
    }

    fn bump_core(&mut self, kind: ExternalKind) {
        match kind {
            ExternalKind::Func | ExternalKind::FuncExact => self.core_funcs += 1,
            ExternalKind::Memory => self.core_memories += 1,
            _ => {}
        }
    }
}

/// The accessor module's imports, for the restorer, and what they cover.
fn imports(c: &Counts) -> wasmtime::Result<(ImportSection, Layout)> {
    let mut imports = ImportSection::new();
    let mut layout = Layout::default();
    for (module, field, ty) in &c.last_imports {
        match ty {
            TypeRef::Global(g) => {
                let val_type = match g.content_type {
                    wasmparser::ValType::I32 => ValType::I32,
                    wasmparser::ValType::I64 => ValType::I64,
                    wasmparser::ValType::F32 => ValType::F32,
                    wasmparser::ValType::F64 => ValType::F64,
                    other => wasmtime::bail!("the engine has a global of type {other:?}"),
                };
                imports.import(module, field, GlobalType { val_type, mutable: g.mutable, shared: false });
                layout.globals.push((val_type, g.mutable));
            }
            TypeRef::Memory(m) if !m.memory64 && !m.shared && m.page_size_log2.is_none() => {
                let ty = MemoryType {
                    minimum: m.initial,
                    maximum: m.maximum,
                    memory64: false,
                    shared: false,
                    page_size_log2: None,
                };
                imports.import(module, field, ty);
                layout.memories += 1;
            }
            other => wasmtime::bail!("the engine's state includes {other:?}, which the restorer does not set"),
        }
    }
    Ok((imports, layout))
}

/// The restorer core module: functions `begin`, `scratch-realloc`, `target-realloc`,
/// `write{m}`; memories `scratch` and `mem{m}` (its imports, exported again).
fn restorer(imports: ImportSection, layout: &Layout) -> Module {
    let memories = layout.memories;
    let (scratch, cursor) = (memories, layout.globals.len() as u32);
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32; 4], [ValType::I32]);
    types.ty().function([ValType::I32; 2], []);
    types.ty().function([ValType::I32; 2 * LISTS], []);
    let mut functions = FunctionSection::new();
    let mut exports = ExportSection::new();
    let mut code = CodeSection::new();
    for (name, ty, body) in [
        ("scratch-realloc", 0, scratch_realloc(scratch)),
        ("target-realloc", 0, target_realloc(scratch, cursor)),
        ("begin", 1, begin(layout, scratch, cursor)),
    ] {
        exports.export(name, ExportKind::Func, functions.len());
        functions.function(ty);
        code.function(&body);
    }
    for m in 0..memories {
        exports.export(&format!("write{m}"), ExportKind::Func, functions.len());
        exports.export(&format!("mem{m}"), ExportKind::Memory, m);
        functions.function(2);
        let mut nothing = Function::new([]);
        nothing.instructions().end();
        code.function(&nothing);
    }
    exports.export("scratch", ExportKind::Memory, scratch);
    let mut memory = MemorySection::new();
    memory.memory(MemoryType { minimum: 0, maximum: None, memory64: false, shared: false, page_size_log2: None });
    let mut globals = GlobalSection::new();
    globals.global(GlobalType { val_type: ValType::I32, mutable: true, shared: false }, &ConstExpr::i32_const(0));
    let mut module = Module::new();
    module.section(&types).section(&imports).section(&functions).section(&memory).section(&globals);
    module.section(&exports).section(&code);
    module
}

/// The restorer instantiated beside wizer's accessor module and its functions lifted and
/// exported: the sections appended to the instrumented component.
fn lifted(c: &Counts, restorer: &Module, memories: u32) -> Component {
    let mut extra = Component::new();
    extra.section(&ModuleSection(restorer));
    let mut instances = InstanceSection::new();
    instances.instantiate(c.core_modules, c.last_args.iter().map(|(n, i)| (n.as_str(), ModuleArg::Instance(*i))));
    extra.section(&instances);
    // Core functions from c.core_funcs: begin, scratch-realloc, target-realloc, write{m}; core
    // memories from c.core_memories: scratch, mem{m}.
    let mut aliases = ComponentAliasSection::new();
    for name in ["begin", "scratch-realloc", "target-realloc"] {
        aliases.alias(alias(c.core_instances, ExportKind::Func, name));
    }
    for m in 0..memories {
        aliases.alias(alias(c.core_instances, ExportKind::Func, &format!("write{m}")));
    }
    aliases.alias(alias(c.core_instances, ExportKind::Memory, "scratch"));
    for m in 0..memories {
        aliases.alias(alias(c.core_instances, ExportKind::Memory, &format!("mem{m}")));
    }
    extra.section(&aliases);
    let list = c.types;
    let mut types = ComponentTypeSection::new();
    types.defined_type().list(ComponentValType::Primitive(PrimitiveValType::U8));
    types.function().params([("state", ComponentValType::Type(list))]).result(None);
    let runs: Vec<String> = (0..LISTS).map(|l| format!("run{l}")).collect();
    types.function().params(runs.iter().map(|r| (r.as_str(), ComponentValType::Type(list)))).result(None);
    extra.section(&types);
    let (f, mem) = (c.core_funcs, c.core_memories);
    let mut canon = CanonicalFunctionSection::new();
    canon.lift(f, list + 1, [CanonicalOption::Memory(mem), CanonicalOption::Realloc(f + 1)]);
    for m in 0..memories {
        canon.lift(f + 3 + m, list + 2, [CanonicalOption::Memory(mem + 1 + m), CanonicalOption::Realloc(f + 2)]);
    }
    extra.section(&canon);
    let mut exports = ComponentExportSection::new();
    exports.export(BEGIN, ComponentExportKind::Func, c.funcs, None);
    for m in 0..memories {
        exports.export(format!("{WRITE}{m}"), ComponentExportKind::Func, c.funcs + 1 + m, None);
    }
    extra.section(&exports);
    extra
}

fn alias(instance: u32, kind: ExportKind, name: &str) -> Alias<'_> {
    Alias::CoreInstanceExport { instance, kind, name }
}

fn at(offset: u64, align: u32, memory_index: u32) -> MemArg {
    MemArg { offset, align, memory_index }
}

/// `realloc(old, old_len, align, len)` for `begin`: the scratch memory grown to `len`; 0.
fn scratch_realloc(scratch: u32) -> Function {
    let mut f = Function::new([(1, ValType::I32)]);
    let mut i = f.instructions();
    i.local_get(3).i32_const(0xffff).i32_add().i32_const(16).i32_shr_u();
    i.memory_size(scratch).i32_sub().local_tee(4);
    i.i32_const(0).i32_gt_s().if_(BlockType::Empty);
    i.local_get(4).memory_grow(scratch).i32_const(-1).i32_eq().if_(BlockType::Empty).unreachable().end();
    i.end();
    i.i32_const(0).end();
    f
}

/// `realloc` for `write{m}`: the next run's address, taken from the queue under the cursor.
fn target_realloc(scratch: u32, cursor: u32) -> Function {
    let mut f = Function::new([]);
    let mut i = f.instructions();
    i.local_get(3).i32_eqz().if_(BlockType::Empty).i32_const(0).return_().end();
    i.global_get(cursor).i32_load(at(0, 2, scratch));
    i.global_get(cursor).i32_const(4).i32_add().global_set(cursor);
    i.end();
    f
}

/// `begin(0, len)`: each memory grown to its size, each mutable global set, the cursor at the
/// first run's address.
fn begin(layout: &Layout, scratch: u32, cursor: u32) -> Function {
    let mut f = Function::new([(1, ValType::I32)]);
    let mut i = f.instructions();
    for m in 0..layout.memories {
        i.i32_const(0).i32_load(at(u64::from(m) * 4, 2, scratch));
        i.memory_size(m).i32_sub().local_tee(2);
        i.i32_const(0).i32_gt_s().if_(BlockType::Empty);
        i.local_get(2).memory_grow(m).i32_const(-1).i32_eq().if_(BlockType::Empty).unreachable().end();
        i.end();
    }
    let globals_at = u64::from(layout.memories) * 4;
    for (g, (ty, mutable)) in layout.globals.iter().enumerate() {
        if !mutable {
            continue;
        }
        let offset = globals_at + g as u64 * 8;
        i.i32_const(0);
        match ty {
            ValType::I32 => i.i32_load(at(offset, 2, scratch)),
            ValType::I64 => i.i64_load(at(offset, 3, scratch)),
            ValType::F32 => i.f32_load(at(offset, 2, scratch)),
            _ => i.f64_load(at(offset, 3, scratch)),
        };
        i.global_set(g as u32);
    }
    let queue_at = globals_at + layout.globals.len() as u64 * 8;
    i.i32_const(queue_at as i32).global_set(cursor).end();
    f
}
