//! go-component: makes a kubewasm component from a Go core module (`GOOS=wasip1 GOARCH=wasm
//! go build -buildmode=c-shared`), as `make go-plugins` runs it.
//!
//! Three steps, the last two what `wasm-tools component embed` and `component new` do (through
//! the same wit-component library): give the WASI preview1 adapter an arena in Go's data
//! ([`arena`]), embed the world's metadata, and wrap the module and the adapter into a component.

mod arena;

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::Resolve;

/// Makes a kubewasm component from a Go (GOOS=wasip1) core module built with the Go SDK.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// The Go core module (`go build -buildmode=c-shared`, GOOS=wasip1 GOARCH=wasm).
    core: PathBuf,
    /// The WIT package (directory or file) whose world the module implements.
    #[arg(long, env = "KUBEWASM_GO_WIT")]
    wit: PathBuf,
    /// The world in that package.
    #[arg(long, env = "KUBEWASM_GO_WORLD", default_value = "controller")]
    world: String,
    /// The WASI preview1 reactor adapter (`wasi_snapshot_preview1.reactor.wasm`).
    #[arg(long, env = "KUBEWASM_GO_ADAPTER")]
    adapter: PathBuf,
    /// Where to write the component.
    #[arg(short, long, env = "KUBEWASM_GO_OUTPUT")]
    output: PathBuf,
}

/// The adapter must allocate its stack lazily through the main module's realloc, which needs
/// this global (wit-component's `gc.rs`); without it the stack would come from `memory.grow`,
/// in pages Go's heap later takes.
const ADAPTER_STATE_GLOBAL: &str = "allocation_state";

/// Whether the adapter's name section names a global `name`.
fn has_global(module: &[u8], name: &str) -> anyhow::Result<bool> {
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        let wasmparser::Payload::CustomSection(section) = payload? else { continue };
        let wasmparser::KnownCustom::Name(names) = section.as_known() else { continue };
        for subsection in names {
            let wasmparser::Name::Global(map) = subsection? else { continue };
            for naming in map {
                if naming?.name == name {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let core = std::fs::read(&cli.core).with_context(|| format!("reading {}", cli.core.display()))?;
    let adapter = std::fs::read(&cli.adapter).with_context(|| format!("reading {}", cli.adapter.display()))?;
    if !has_global(&adapter, ADAPTER_STATE_GLOBAL)? {
        bail!(
            "the adapter {} has no `{ADAPTER_STATE_GLOBAL}` global: its stack would be allocated with memory.grow",
            cli.adapter.display()
        );
    }
    let (mut module, arenas) = arena::add_reallocs(&core)
        .with_context(|| format!("adding the arenas' allocators to {}", cli.core.display()))?;

    let mut resolve = Resolve::new();
    let (package, _) = resolve.push_path(&cli.wit)?;
    let world = resolve.select_world(&[package], Some(&cli.world))?;
    wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)?;

    let component = ComponentEncoder::default()
        .validate(true)
        .module(&module)?
        .adapter("wasi_snapshot_preview1", &adapter)?
        .encode()
        .context("making the component")?;
    std::fs::write(&cli.output, &component).with_context(|| format!("writing {}", cli.output.display()))?;
    eprintln!(
        "go-component: {} ({} bytes; adapter arena {:#x}..{:#x}, receive arena {:#x}..{:#x})",
        cli.output.display(),
        component.len(),
        arenas.adapter.start,
        arenas.adapter.end,
        arenas.receive.start,
        arenas.receive.end
    );
    Ok(())
}
