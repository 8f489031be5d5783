//! The `kubewasm` binary: CLI → telemetry → app, until SIGTERM/SIGINT.

use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser as _;
use kube::core::GroupVersionKind;
use kubewasm::cli::{CheckArgs, Cli, Command};
use kubewasm::{run, telemetry};
use kubewasm_host::plugin::host::testing::{MemoryCache, RecordingWriter};
use kubewasm_host::plugin::{Runtime, RuntimeConfig};
use kubewasm_host::{app, shutdown};
use tokio_util::sync::CancellationToken;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(&cli.log).context("invalid --log filter")?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        match cli.command {
            Command::Run(args) => {
                let token = CancellationToken::new();
                shutdown::on_signal(token.clone());
                run::run(*args, token).await
            }
            Command::Check(args) => check(args).await,
            Command::Rbac(args) => {
                let (name, plugin) = load(args.plugin).await?;
                let identity = kubewasm_host::rbac::Identity {
                    namespace: args.namespace,
                    host_service_account: args.host_service_account,
                };
                print!("{}", kubewasm_host::rbac::manifest(&name, plugin.grants(), &identity, &kubewasm_host::rbac::ResourceNames::guessed())?);
                Ok(())
            }
            Command::CompilePlugin(args) => {
                // One line on stderr, for the host to quote; no backtrace.
                if let Err(e) = kubewasm_host::plugin::compile_process::child(args.into()) {
                    eprintln!("{e:#}");
                    std::process::exit(1);
                }
                Ok(())
            }
            Command::Push(args) => {
                println!("{}", kubewasm::cli::oci::push(&args).await?);
                Ok(())
            }
            Command::GenerateKey(args) => {
                let (private, public) = kubewasm::cli::oci::generate_key(&args)?;
                println!("wrote {} (private) and {} (public)", private.display(), public.display());
                Ok(())
            }
            Command::Crd => {
                print!("{}", kubewasm_host::hotload::crd_yaml());
                Ok(())
            }
            Command::Record(args) => kubewasm::offline::command::record(args).await,
            Command::Dev(args) => kubewasm::dev::run(*args).await,
            Command::New(args) => {
                let dir = kubewasm::scaffold::new(args.language, &args.name, args.dir.as_deref(), args.sdk.as_deref())?;
                println!("created {}: build with {0}/build.sh, test with `kubewasm test {0}/{1}.wasm --objects {0}/tests/fixtures.yaml --expect {0}/tests/expected.yaml`", dir.display(), args.name);
                Ok(())
            }
            Command::Test(args) => {
                if !kubewasm::offline::command::test(args).await? {
                    std::process::exit(1);
                }
                Ok(())
            }
        }
    })
}

/// Loads a plugin with no cluster behind it; returns its name (the file's) and the plugin.
async fn load(args: CheckArgs) -> anyhow::Result<(String, kubewasm_host::plugin::Plugin)> {
    let mut name = args.wasm.file_stem().unwrap_or_default().to_string_lossy().into_owned();
    let config = args
        .config
        .or_else(|| ["yaml", "yml", "json"].iter().map(|e| args.wasm.with_extension(e)).find(|p| p.is_file()));
    let config_path = config.clone();
    let config = match config.as_deref().map(wasm_plugin_manifest).transpose()?.flatten() {
        Some(manifest) => {
            name = kube::ResourceExt::name_any(&manifest);
            manifest.spec.plugin_config()
        }
        None => app::read_config(&app::PluginFile { name: name.clone(), wasm: Some(args.wasm.clone()), config })?,
    };
    let wasm = std::fs::read(&args.wasm).with_context(|| format!("reading {}", args.wasm.display()))?;
    let mut runtime_config = RuntimeConfig::default().compiler(args.compiler);
    if let Some(dir) = &args.compile_cache {
        runtime_config = runtime_config.cache_dir(dir);
    }
    let runtime = Runtime::new(runtime_config)?;
    let loaded = runtime.load(
        &name,
        wasm.into(),
        config,
        Arc::new(MemoryCache::default()),
        Arc::new(RecordingWriter::default()),
    );
    // A rejection names the file to fix: the config for its grants, limits or settings.
    let plugin = loaded.await.map_err(|e| {
        let blamed = match (config_path, e.blames_config()) {
            (Some(config), true) => config.display().to_string(),
            (None, true) => format!(
                "{} (absent: create it beside {})",
                args.wasm.with_extension("yaml").display(),
                args.wasm.display()
            ),
            (_, false) => args.wasm.display().to_string(),
        };
        anyhow::Error::new(e).context(blamed)
    })?;
    Ok((name, plugin))
}

/// The WasmPlugin `path` holds, if it is a WasmPlugin manifest rather than a plugin config
/// file: its spec is then the config, and its name the plugin's.
fn wasm_plugin_manifest(path: &std::path::Path) -> anyhow::Result<Option<kubewasm_host::hotload::WasmPlugin>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_yaml::Value =
        serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if value.get("kind").and_then(serde_yaml::Value::as_str) != Some("WasmPlugin") {
        return Ok(None);
    }
    let manifest =
        serde_yaml::from_value(value).with_context(|| format!("{}: not a valid WasmPlugin", path.display()))?;
    Ok(Some(manifest))
}

/// Loads a plugin with no cluster behind it and prints what it registers and may access.
async fn check(args: CheckArgs) -> anyhow::Result<()> {
    let (name, plugin) = load(args).await?;
    let reg = plugin.registration();
    println!("plugin:         {name} (sha256 {})", plugin.sha256());
    let no_filter = kubewasm_host::plugin::registration::EventFilter::default();
    let owns = reg.owns.iter().enumerate().map(|(i, kind)| (kind, reg.owns_filters.get(i).unwrap_or(&no_filter)));
    println!("reconciles:     {}", filtered([(&reg.for_kind, &reg.for_filter)]));
    println!("owns:           {}", filtered(owns));
    println!("watches:        {}", filtered(reg.watches.iter().map(|w| (&w.kind, &w.filter))));
    println!("reads:          {}", plugin.grants().readable().map(ToString::to_string).collect::<Vec<_>>().join(", "));
    let join = |kinds: Vec<String>| kinds.join(", ");
    println!("writes:         {}", join(plugin.grants().writable().map(ToString::to_string).collect()));
    println!(
        "writes where it controls the object: {}",
        join(plugin.grants().writable_controlled().map(ToString::to_string).collect())
    );
    println!("max-concurrent: {}", plugin.max_concurrent());
    Ok(())
}

/// Kinds as a manifest names them, `apiVersion kind` (`v1 Namespace`, `apps/v1 Deployment`),
/// each with its event filter in parentheses if it has one, comma-separated; `-` for none.
fn filtered<'a>(
    kinds: impl IntoIterator<Item = (&'a GroupVersionKind, &'a kubewasm_host::plugin::registration::EventFilter)>,
) -> String {
    let names: Vec<String> = kinds
        .into_iter()
        .map(|(g, filter)| match filter.is_empty() {
            true => format!("{} {}", g.api_version(), g.kind),
            false => format!("{} {} ({filter})", g.api_version(), g.kind),
        })
        .collect();
    if names.is_empty() { "-".to_owned() } else { names.join(", ") }
}
