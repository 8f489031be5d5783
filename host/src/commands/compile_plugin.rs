//! `kubewasm compile-plugin` (hidden): the child process the host compiles a component in.

use std::path::PathBuf;

use clap::{ArgAction, Args};

/// `kubewasm compile-plugin` (hidden): the engine settings of the host that runs it (the
/// flags [`compile_process`](kubewasm_host::plugin::compile_process) passes its child; its side
/// is [`compile_child`](kubewasm_host::plugin::engine::compile_child)).
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// The compile cache to fill.
    #[arg(long)]
    pub compile_cache: PathBuf,
    /// The host's largest linear memory.
    #[arg(long)]
    pub max_memory_bytes: u64,
    /// The host's instance pool size.
    #[arg(long)]
    pub pool_instances: u32,
    /// The host's bytes kept resident per freed slot.
    #[arg(long)]
    pub keep_resident: usize,
    /// Whether the host uses the pagemap scan.
    #[arg(long, action = ArgAction::Set)]
    pub pagemap_scan: bool,
    /// The host's code generator.
    #[arg(long)]
    pub compiler: kubewasm_host::plugin::Compiler,
}

impl From<CompileArgs> for kubewasm_host::plugin::engine::ChildSettings {
    fn from(a: CompileArgs) -> Self {
        Self {
            compile_cache: a.compile_cache,
            max_memory_bytes: a.max_memory_bytes,
            pool_instances: a.pool_instances,
            keep_resident: a.keep_resident,
            pagemap_scan: a.pagemap_scan,
            compiler: a.compiler,
        }
    }
}

impl CompileArgs {
    /// Compiles the component on stdin into the compile cache; on failure prints one line on
    /// stderr, for the host to quote (no backtrace), and exits 1.
    pub fn execute(self) -> anyhow::Result<()> {
        if let Err(e) = kubewasm_host::plugin::engine::compile_child(self.into()) {
            eprintln!("{e:#}");
            std::process::exit(1);
        }
        Ok(())
    }
}
