//! Arenas: memory in a Go module's data for what Go's allocator cannot serve.
//!
//! Go's wasm runtime owns all linear memory above its data (`runtime.sbrk` starts at the end of
//! Go's data and hands out every page above it, including pages someone else grew), so nothing
//! else may grow pages for itself. And two callers cannot use a Go allocator: the WASI adapter
//! (it allocates while Go is on its system stack) and the host writing results and arguments
//! (the component model forbids calls out of the instance inside `cabi_realloc`, and Go's heap
//! growth reads the clock). The Go SDK (`plugins/sdk/go/arena.go`) declares two zeroed arrays
//! that open with a marker and their size, so the linker puts them in data segments, below the
//! heap. This module finds them and exports two allocators written in plain wasm:
//! `cabi_realloc_adapter` (wit-component links it to the adapter only) bump-allocates from the
//! adapter arena and never frees; `cabi_realloc` bump-allocates from the receive arena, whose
//! next free address lives in the arena's header, where the SDK resets it between calls.
//! Both trap when their arena is used up. No crate does this rewrite; wasm-encoder's reencoder
//! copies the rest of the module.

use wasm_encoder::reencode::{Reencode, utils};
use wasm_encoder::{ConstExpr, ExportKind, Function, GlobalType, Instruction, ValType};
use wasmparser::{DataKind, Operator, Parser, Payload};

/// The bytes the Go SDK's adapter arena opens with, then its size in bytes as a little-endian
/// u64.
pub const ADAPTER: &[u8; 32] = b"kubewasm go adapter arena v1 ###";

/// The bytes the Go SDK's receive arena opens with, then its size; the next free address is the
/// u32 at [`RECEIVE_NEXT`] (0: the start of its data at [`RECEIVE_DATA`]).
pub const RECEIVE: &[u8; 32] = b"kubewasm go receive arena v1 ###";

/// Offset of the receive arena's next free address (word 5 of the Go array).
pub const RECEIVE_NEXT: u32 = 40;

/// Offset of the receive arena's first allocatable byte.
pub const RECEIVE_DATA: u32 = 48;

/// The export wit-component links to the adapter's `cabi_realloc` import.
pub const ADAPTER_EXPORT: &str = "cabi_realloc_adapter";

/// The export the canonical ABI allocates the module's results and arguments with.
pub const RECEIVE_EXPORT: &str = "cabi_realloc";

/// Why a module cannot be given an adapter arena.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The module is not valid wasm.
    #[error("reading the module")]
    Parse(#[from] wasmparser::Error),
    /// Rewriting the module failed.
    #[error("rewriting the module: {0}")]
    Reencode(String),
    /// No data segment holds the marker: the module was not built with the Go SDK.
    #[error("no arena marked {0:?} in the module: build it with the kubewasm Go SDK (plugins/sdk/go)")]
    NoArena(String),
    /// The marker is in more than one place, so the arena's address is ambiguous.
    #[error("the arena marker {0:?} occurs {1} times")]
    Ambiguous(String, usize),
    /// The arena is smaller than its own marker, or does not fit below 4 GiB.
    #[error("the adapter arena at {addr:#x} has an invalid size {size}")]
    BadSize {
        /// Address of the arena.
        addr: u32,
        /// Size the arena declares.
        size: u64,
    },
    /// The module already exports a name this adds (a Go `cabi_realloc` from an older SDK).
    #[error("the module already exports `{0}`")]
    AlreadyExported(String),
}

/// Where the arena is: its first byte and one past its last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arena {
    /// Address of the arena's first byte.
    pub start: u32,
    /// Address one past its last byte.
    pub end: u32,
}

/// Finds the arena opening with `marker` in the module's active data segments.
pub fn find(module: &[u8], marker: &[u8; 32]) -> Result<Arena, Error> {
    let mut found = Vec::new();
    for payload in Parser::new(0).parse_all(module) {
        let Payload::DataSection(section) = payload? else { continue };
        for data in section {
            let data = data?;
            let DataKind::Active { offset_expr, .. } = data.kind else { continue };
            let Ok(Operator::I32Const { value }) = offset_expr.get_operators_reader().read() else { continue };
            for (i, window) in data.data.windows(marker.len()).enumerate() {
                if window == marker {
                    // The size follows the marker; the linker drops the size's trailing zero bytes.
                    let mut size = [0u8; 8];
                    let rest = &data.data[i + marker.len()..];
                    let n = rest.len().min(8);
                    size[..n].copy_from_slice(&rest[..n]);
                    found.push(((value as u32).wrapping_add(i as u32), u64::from_le_bytes(size)));
                }
            }
        }
    }
    let name = || String::from_utf8_lossy(marker).into_owned();
    match found.as_slice() {
        [] => Err(Error::NoArena(name())),
        &[(start, size)] => {
            let end = u64::from(start) + size;
            if size < u64::from(RECEIVE_DATA) || end > u64::from(u32::MAX) {
                return Err(Error::BadSize { addr: start, size });
            }
            Ok(Arena { start, end: end as u32 })
        }
        many => Err(Error::Ambiguous(name(), many.len())),
    }
}

/// Where the two arenas of a module are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arenas {
    /// The WASI adapter's state and stack.
    pub adapter: Arena,
    /// Results of host calls and arguments of exports.
    pub receive: Arena,
}

/// `module` with the exported allocators `cabi_realloc_adapter` and `cabi_realloc`; returns the
/// rewritten module and where the arenas are.
pub fn add_reallocs(module: &[u8]) -> Result<(Vec<u8>, Arenas), Error> {
    let arenas = Arenas { adapter: find(module, ADAPTER)?, receive: find(module, RECEIVE)? };
    let mut adder = Adder { arenas, types: 0, funcs: 0, globals: 0, realloc_type: None };
    let mut out = wasm_encoder::Module::new();
    utils::parse_core_module(&mut adder, &mut out, Parser::new(0), module).map_err(|e| match e {
        wasm_encoder::reencode::Error::UserError(e) => e,
        other => Error::Reencode(other.to_string()),
    })?;
    Ok((out.finish(), arenas))
}

/// Copies a module, appending one type, one global (the adapter arena's next free byte), two
/// functions and two exports. Appending keeps every existing index valid. Function bodies are
/// copied as bytes.
struct Adder {
    arenas: Arenas,
    types: u32,
    funcs: u32,
    globals: u32,
    realloc_type: Option<u32>,
}

impl Adder {
    /// `(old_ptr, old_len, align, new_len) -> ptr` from the adapter arena: a fresh allocation
    /// only (the adapter never reallocates); traps when the arena is used up.
    fn adapter_realloc(&self, next: u32) -> Function {
        use Instruction as I;
        let mut f = Function::new([(3, ValType::I32)]);
        for i in [I::GlobalGet(next), I::LocalSet(NEXT)] {
            f.instruction(&i);
        }
        bump(&mut f, self.arenas.adapter.end);
        for i in [I::LocalGet(END), I::GlobalSet(next), I::LocalGet(PTR), I::End] {
            f.instruction(&i);
        }
        f
    }

    /// The same from the receive arena, its next free address in the arena's header (0: the
    /// start of its data), which the Go SDK resets between calls.
    fn receive_realloc(&self) -> Function {
        use Instruction as I;
        let header = (self.arenas.receive.start + RECEIVE_NEXT) as i32;
        let word = wasm_encoder::MemArg { offset: 0, align: 2, memory_index: 0 };
        let mut f = Function::new([(3, ValType::I32)]);
        for i in [
            I::I32Const(header),
            I::I32Load(word),
            I::LocalTee(NEXT),
            I::I32Eqz,
            I::If(wasm_encoder::BlockType::Empty),
            I::I32Const((self.arenas.receive.start + RECEIVE_DATA) as i32),
            I::LocalSet(NEXT),
            I::End,
        ] {
            f.instruction(&i);
        }
        bump(&mut f, self.arenas.receive.end);
        for i in [I::I32Const(header), I::LocalGet(END), I::I32Store(word), I::LocalGet(PTR), I::End] {
            f.instruction(&i);
        }
        f
    }
}

/// Locals of the allocators after their four parameters `(old_ptr, old_len, align, new_len)`.
const PTR: u32 = 4;
const END: u32 = 5;
const NEXT: u32 = 6;

/// Sets `PTR` to `NEXT` aligned and `END` to `PTR + new_len`; traps on a reallocation (neither
/// the adapter nor the canonical ABI's lowering asks for one) or past `limit`.
fn bump(f: &mut Function, limit: u32) {
    use Instruction as I;
    let (old_ptr, align, new_len) = (0, 2, 3);
    for i in [
        I::LocalGet(old_ptr),
        I::If(wasm_encoder::BlockType::Empty),
        I::Unreachable,
        I::End,
        // ptr = (next + align - 1) & -align
        I::LocalGet(NEXT),
        I::LocalGet(align),
        I::I32Add,
        I::I32Const(1),
        I::I32Sub,
        I::I32Const(0),
        I::LocalGet(align),
        I::I32Sub,
        I::I32And,
        I::LocalTee(PTR),
        I::LocalGet(new_len),
        I::I32Add,
        I::LocalTee(END),
        // end > limit, or wrapped around
        I::I32Const(limit as i32),
        I::I32GtU,
        I::LocalGet(END),
        I::LocalGet(PTR),
        I::I32LtU,
        I::I32Or,
        I::If(wasm_encoder::BlockType::Empty),
        I::Unreachable,
        I::End,
    ] {
        f.instruction(&i);
    }
}

impl Reencode for Adder {
    type Error = Error;

    fn parse_type_section(
        &mut self,
        types: &mut wasm_encoder::TypeSection,
        section: wasmparser::TypeSectionReader<'_>,
    ) -> Result<(), wasm_encoder::reencode::Error<Error>> {
        utils::parse_type_section(self, types, section)?;
        self.types = types.len();
        types.ty().function([ValType::I32; 4], [ValType::I32]);
        self.realloc_type = Some(self.types);
        Ok(())
    }

    fn parse_import_section(
        &mut self,
        imports: &mut wasm_encoder::ImportSection,
        section: wasmparser::ImportSectionReader<'_>,
    ) -> Result<(), wasm_encoder::reencode::Error<Error>> {
        for import in section.clone().into_imports() {
            match import?.ty {
                wasmparser::TypeRef::Func(_) => self.funcs += 1,
                wasmparser::TypeRef::Global(_) => self.globals += 1,
                _ => {}
            }
        }
        utils::parse_import_section(self, imports, section)
    }

    fn parse_function_section(
        &mut self,
        functions: &mut wasm_encoder::FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), wasm_encoder::reencode::Error<Error>> {
        self.funcs += section.count();
        utils::parse_function_section(self, functions, section)?;
        let ty = self.realloc_type.expect("Go modules have a type section");
        functions.function(ty).function(ty);
        Ok(())
    }

    fn parse_global_section(
        &mut self,
        globals: &mut wasm_encoder::GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> Result<(), wasm_encoder::reencode::Error<Error>> {
        self.globals += section.count();
        utils::parse_global_section(self, globals, section)?;
        let ty = GlobalType { val_type: ValType::I32, mutable: true, shared: false };
        globals.global(ty, &ConstExpr::i32_const(self.arenas.adapter.start as i32));
        Ok(())
    }

    fn parse_export_section(
        &mut self,
        exports: &mut wasm_encoder::ExportSection,
        section: wasmparser::ExportSectionReader<'_>,
    ) -> Result<(), wasm_encoder::reencode::Error<Error>> {
        for export in section.clone() {
            let name = export?.name;
            if name == ADAPTER_EXPORT || name == RECEIVE_EXPORT {
                return Err(wasm_encoder::reencode::Error::UserError(Error::AlreadyExported(name.into())));
            }
        }
        utils::parse_export_section(self, exports, section)?;
        // Imported and defined functions come first; the two allocators after all of them.
        exports.export(ADAPTER_EXPORT, ExportKind::Func, self.funcs);
        exports.export(RECEIVE_EXPORT, ExportKind::Func, self.funcs + 1);
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut wasm_encoder::CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), wasm_encoder::reencode::Error<Error>> {
        for body in section {
            code.raw(body?.as_bytes());
        }
        code.function(&self.adapter_realloc(self.globals));
        code.function(&self.receive_realloc());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module shaped like Go's: a type, a function, a global, an export and a data segment
    /// holding an adapter arena of `size` bytes at `addr` and a receive arena of 64 KiB after it
    /// (only the markers and sizes are stored).
    fn module(addr: u32, size: u64) -> Vec<u8> {
        let mut m = wasm_encoder::Module::new();
        let mut types = wasm_encoder::TypeSection::new();
        types.ty().function([], []);
        m.section(&types);
        let mut funcs = wasm_encoder::FunctionSection::new();
        funcs.function(0);
        m.section(&funcs);
        let mut mems = wasm_encoder::MemorySection::new();
        mems.memory(wasm_encoder::MemoryType {
            minimum: 4,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        m.section(&mems);
        let mut globals = wasm_encoder::GlobalSection::new();
        globals.global(GlobalType { val_type: ValType::I32, mutable: true, shared: false }, &ConstExpr::i32_const(0));
        m.section(&globals);
        let mut exports = wasm_encoder::ExportSection::new();
        exports.export("memory", ExportKind::Memory, 0).export("_initialize", ExportKind::Func, 0);
        m.section(&exports);
        let mut code = wasm_encoder::CodeSection::new();
        let mut f = Function::new([]);
        f.instruction(&Instruction::End);
        code.function(&f);
        m.section(&code);
        let mut data = wasm_encoder::DataSection::new();
        let mut bytes = b"other data".to_vec();
        bytes.extend_from_slice(ADAPTER);
        bytes.extend_from_slice(&size.to_le_bytes()[..3]);
        data.active(0, &ConstExpr::i32_const((addr - 10) as i32), bytes);
        let mut receive = RECEIVE.to_vec();
        receive.extend_from_slice(&65536u64.to_le_bytes()[..3]);
        data.active(0, &ConstExpr::i32_const((addr as u64 + size) as i32), receive);
        m.section(&data);
        m.finish()
    }

    #[test]
    fn each_arena_is_found_by_its_marker_with_its_size() {
        let m = module(0x1000, 0x20040);
        assert_eq!(find(&m, ADAPTER).unwrap(), Arena { start: 0x1000, end: 0x21040 });
        assert_eq!(find(&m, RECEIVE).unwrap(), Arena { start: 0x21040, end: 0x31040 });
    }

    #[test]
    fn a_module_without_the_marker_is_refused() {
        let m = wasm_encoder::Module::new().finish();
        assert!(matches!(find(&m, ADAPTER), Err(Error::NoArena(_))));
    }

    #[test]
    fn the_rewritten_module_is_valid_and_exports_both_allocators() {
        let (out, _) = add_reallocs(&module(0x1000, 0x20040)).unwrap();
        wasmparser::Validator::new().validate_all(&out).unwrap();
        let exports: Vec<String> = Parser::new(0)
            .parse_all(&out)
            .filter_map(|p| match p.unwrap() {
                Payload::ExportSection(s) => {
                    Some(s.into_iter().map(|e| e.unwrap().name.to_owned()).collect::<Vec<_>>())
                }
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(exports, ["memory", "_initialize", ADAPTER_EXPORT, RECEIVE_EXPORT]);
    }
}
