//! The compile process's child side (`kubewasm compile-plugin`): builds the engine its parent
//! has and compiles the component on stdin into the compile cache.

use std::io::Read as _;
use std::path::PathBuf;

use super::{Compiler, Runtime, RuntimeConfig};

/// The engine settings a child is started with (as `--flag value` arguments after
/// [`SUBCOMMAND`](crate::compile_process::SUBCOMMAND); the CLI parses them back into this).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildSettings {
    /// The compile cache to fill.
    pub compile_cache: PathBuf,
    /// The host's largest linear memory.
    pub max_memory_bytes: u64,
    /// The host's instance pool size.
    pub pool_instances: u32,
    /// The host's bytes kept resident per freed slot.
    pub keep_resident: usize,
    /// Whether the host uses the pagemap scan.
    pub pagemap_scan: bool,
    /// The host's code generator.
    pub compiler: Compiler,
}

/// The child: builds the engine `args` describe and compiles the component on stdin into the
/// cache.
pub fn compile_child(args: ChildSettings) -> anyhow::Result<()> {
    let config = RuntimeConfig::default()
        .cache_dir(&args.compile_cache)
        .max_memory_bytes(args.max_memory_bytes)
        .pool_instances(args.pool_instances)
        .keep_resident(args.keep_resident)
        .pagemap_scan(args.pagemap_scan)
        .compiler(args.compiler);
    let runtime = Runtime::new(config)?;
    let mut wasm = Vec::new();
    std::io::stdin().read_to_end(&mut wasm)?;
    runtime.compile_to_cache(&wasm).map_err(|e| anyhow::anyhow!("{e:#}"))
}
