//! `kubewasm test`: the command-line glue around [`super::Harness`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;

use super::fixtures::{self, Recording};
use super::{Harness, diff, parse_expected};
use crate::cli::TestArgs;
use kubewasm_host::hotload::{PluginFile, read_config};
use kubewasm_host::plugin::{PluginConfig, Runtime, RuntimeConfig};

/// The plugin file for `wasm`: named after the file, configured by `config` or else by the
/// `.yaml`/`.yml`/`.json` beside it.
pub fn plugin_file(wasm: &Path, config: Option<PathBuf>) -> PluginFile {
    let name = wasm.file_stem().unwrap_or_default().to_string_lossy().into_owned();
    let config =
        config.or_else(|| ["yaml", "yml", "json"].iter().map(|e| wasm.with_extension(e)).find(|p| p.is_file()));
    PluginFile { name, wasm: Some(wasm.to_owned()), config }
}

/// The plugin's config, with its settings replaced by the file `settings` if given.
pub fn config_with_settings(file: &PluginFile, settings: Option<&Path>) -> anyhow::Result<PluginConfig> {
    let mut config = read_config(file)?;
    if let Some(path) = settings {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        config.settings = Some(serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?);
    }
    Ok(config)
}

/// The wasm runtime of an offline command: the host's defaults, with the compile cache if any.
pub fn runtime(compile_cache: Option<&Path>) -> anyhow::Result<Runtime> {
    let config = RuntimeConfig::default();
    Ok(Runtime::new(match compile_cache {
        Some(dir) => config.cache_dir(dir),
        None => config,
    })?)
}

/// Runs `kubewasm test`: prints the report on stdout; `Ok(false)` when a key did not settle
/// (`--until-settled`), the server-side dry run found a write the server rejects, or the report
/// differs from the expected one (what, and the diff, are on stderr).
pub async fn test(args: TestArgs) -> anyhow::Result<bool> {
    let file = plugin_file(&args.wasm, args.config.clone());
    let config = config_with_settings(&file, args.settings.as_deref())?;
    let (mut objects, mut recording): (Vec<_>, Option<Recording>) = (Vec::new(), None);
    for path in &args.objects {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let parsed = fixtures::parse(&text).with_context(|| format!("in {}", path.display()))?;
        objects.extend(parsed.objects);
        recording = recording.or(parsed.recording);
    }
    let wasm = std::fs::read(&args.wasm).with_context(|| format!("reading {}", args.wasm.display()))?;
    let runtime = runtime(args.compile_cache.as_deref())?;
    let server = match args.server_dry_run {
        true => Some(server(&args).await?),
        false => None,
    };
    let harness =
        Harness::load_checked(&runtime, &file.name, Arc::<[u8]>::from(wasm), config, &objects, server).await?;
    let keys = if !args.keys.is_empty() {
        Some(args.keys.iter().map(|k| fixtures::parse_key(k)).collect())
    } else {
        recording.as_ref().map(|r| vec![fixtures::parse_key(&r.key)])
    };
    let settle = args.until_settled.map(|rounds| (objects.as_slice(), rounds));
    let (report, settled) = super::run_until_settled(&harness, keys, settle).await;
    print!("{}", report.to_yaml());
    let mut unsettled = false;
    for (key, outcome) in settled {
        match outcome {
            Ok(rounds) => eprintln!("kubewasm test: reconcile {key} settled in {rounds} rounds"),
            Err(e) => {
                eprintln!("kubewasm test: reconcile {key} {e}");
                unsettled = true;
            }
        }
    }
    let mut rejected = false;
    for (call, finding) in harness.findings() {
        eprintln!("kubewasm test: {call}: {finding}");
        rejected |= finding.fails();
    }
    if rejected {
        eprintln!("kubewasm test: the API server rejects writes of this run (server-side dry run)");
    }
    let matches = compare(&args, recording, &report)?;
    Ok(matches && !rejected && !unsettled)
}

/// Compares `report` with the expected one (`--expect`, else the recording's), if any.
fn compare(args: &TestArgs, recording: Option<Recording>, report: &super::Report) -> anyhow::Result<bool> {
    let expected = match &args.expect {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Some((parse_expected(&text)?, path.display().to_string()))
        }
        None => recording.map(|r| (r.expect, "the recording".to_owned())),
    };
    let Some((expected, source)) = expected else { return Ok(true) };
    match diff(&expected, report) {
        None => {
            eprintln!("kubewasm test: the writes match {source}");
            Ok(true)
        }
        Some(diff) => {
            eprintln!("kubewasm test: the writes differ from {source}:\n{diff}");
            Ok(false)
        }
    }
}

/// The writer of `--server-dry-run`: the kubeconfig's API server, storing nothing.
async fn server(args: &TestArgs) -> anyhow::Result<Arc<dyn kubewasm_host::plugin::host::ApiWriter>> {
    let client = kubewasm_host::app::client(args.kubeconfig.as_deref(), args.context.as_deref())
        .await
        .context("--server-dry-run needs an API server")?;
    Ok(Arc::new(kubewasm_host::writer::KubeWriter::new(client).dry_run(true)))
}

/// Runs `kubewasm record`: one fixture file per key in `--out`; prints their paths.
pub async fn record(args: crate::cli::RecordArgs) -> anyhow::Result<()> {
    let file = plugin_file(&args.wasm, args.config.clone());
    let config = config_with_settings(&file, args.settings.as_deref())?;
    let wasm = std::fs::read(&args.wasm).with_context(|| format!("reading {}", args.wasm.display()))?;
    let client = kubewasm_host::app::client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let runtime = runtime(args.compile_cache.as_deref())?;
    let keys: Vec<_> = args.keys.iter().map(|k| fixtures::parse_key(k)).collect();
    let files = super::record::record(&runtime, client, &file.name, Arc::<[u8]>::from(wasm), config, &keys).await?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    for (key, text) in files {
        let name = match key.namespace() {
            Some(ns) => format!("{ns}_{}.yaml", key.name()),
            None => format!("{}.yaml", key.name()),
        };
        let path = args.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}
