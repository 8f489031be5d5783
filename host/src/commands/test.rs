//! `kubewasm test`: a plugin's reconciles over fixture objects with no cluster, its writes compared with the expected ones.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context as _;
use clap::Args;

use crate::offline::fixtures::{self, Recording};
use crate::offline::{self, Harness, config_with_settings, diff, parse_expected, plugin_file, runtime};

/// `kubewasm test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// The plugin: its component (`<name>.wasm`), or its source (`<name>.py`, `<name>.js`, or a
    /// directory `<name>/` of them), whose config names its engine.
    pub plugin: PathBuf,
    /// Objects to cache (multi-document YAML; `kind: List` items count), or a recording made by
    /// `kubewasm record`, which also says the key and the expected writes. Repeatable.
    #[arg(long, required = true, env = "KUBEWASM_TEST_OBJECTS", value_delimiter = ',')]
    pub objects: Vec<PathBuf>,
    /// Reconcile only this key (`namespace/name`, or `name` for a cluster-scoped kind); repeatable.
    /// Default: every object of the for kind and every key the plugin maps watched objects to.
    #[arg(long = "key", env = "KUBEWASM_TEST_KEY", value_delimiter = ',')]
    pub keys: Vec<String>,
    /// Expected report (the YAML this command prints): compare, print a diff and exit 1 when
    /// they differ.
    #[arg(long, env = "KUBEWASM_TEST_EXPECT")]
    pub expect: Option<PathBuf>,
    /// Settings (YAML or JSON) to use instead of those of the config file.
    #[arg(long, env = "KUBEWASM_TEST_SETTINGS")]
    pub settings: Option<PathBuf>,
    /// Its config file; default: `<name>.yaml` (`.yml`, `.json`) beside it, if present.
    #[arg(long, env = "KUBEWASM_TEST_CONFIG")]
    pub config: Option<PathBuf>,
    /// The plugin runtime.
    #[command(flatten)]
    pub runtime: offline::RuntimeArgs,
    /// What the plugin reads from the wall clock at every call (RFC 3339, e.g.
    /// `2026-01-01T00:00:00Z`), so the time the SDKs' condition helpers stamp, or a schedule,
    /// is the same in every run and an `--expect` file can hold it. Default: a recording's time,
    /// else the time the run starts.
    #[arg(long, env = "KUBEWASM_TEST_NOW", value_parser = offline::parse_time)]
    pub now: Option<SystemTime>,
    /// Run each key to a fixed point: apply its writes to the fixture objects (server-side apply
    /// as a merge that drops the fields the plugin applied before and no longer names, patches,
    /// creates, deletes), reconcile it again, and so on until a round's writes change nothing;
    /// fail, naming the fields that keep changing in the last two rounds, if that takes more
    /// than N reconciles (default 10). The report is the first round's.
    #[arg(long, env = "KUBEWASM_TEST_UNTIL_SETTLED", value_name = "N", num_args = 0..=1,
          default_missing_value = "10", value_parser = clap::value_parser!(u32).range(1..))]
    pub until_settled: Option<u32>,
    /// Also send each write to the API server of the kubeconfig as a server-side dry run
    /// (`dryRun=All`, as the plugin's field manager): nothing is stored, and a write the server
    /// rejects (422 Invalid, …) fails the run with the server's message. A write in a namespace
    /// the server lacks fails too, unless the same reconcile makes that Namespace: then it is
    /// validated in namespace `default` and reported so. A patch, delete or status apply of an
    /// object only the fixtures hold is reported as not validated. `kubewasm dev`'s cluster is
    /// enough.
    #[arg(long, env = "KUBEWASM_TEST_SERVER_DRY_RUN")]
    pub server_dry_run: bool,
    /// Kubeconfig file for --server-dry-run; default: $KUBECONFIG, ~/.kube/config.
    #[arg(long, env = "KUBEWASM_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context for --server-dry-run; default: the current context.
    #[arg(long, env = "KUBEWASM_CONTEXT")]
    pub context: Option<String>,
}

impl TestArgs {
    /// Runs the test; exits 1 when it fails (why is on stderr).
    pub async fn execute(self) -> anyhow::Result<()> {
        if !test(self).await? {
            std::process::exit(1);
        }
        Ok(())
    }
}

/// Runs `kubewasm test`: prints the report on stdout; `Ok(false)` when a key did not settle
/// (`--until-settled`), the server-side dry run found a write the server rejects, or the report
/// differs from the expected one (what, and the diff, are on stderr).
async fn test(args: TestArgs) -> anyhow::Result<bool> {
    let file = plugin_file(&args.plugin, args.config.clone());
    let config = config_with_settings(&file, args.settings.as_deref())?;
    let (mut objects, mut recording): (Vec<_>, Option<Recording>) = (Vec::new(), None);
    for path in &args.objects {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let parsed = fixtures::parse(&text).with_context(|| format!("in {}", path.display()))?;
        objects.extend(parsed.objects);
        recording = recording.or(parsed.recording);
    }
    let wasm = offline::plugin_bytes(&args.plugin)?;
    let recorded = recording.as_ref().and_then(|r| r.now.as_deref()).map(offline::parse_time).transpose();
    let recorded = recorded.map_err(anyhow::Error::msg).context("the recording's now")?;
    let now = args.now.or(recorded).unwrap_or_else(|| offline::now_to_the_second().0);
    let runtime = runtime(&args.runtime, Some(now))?;
    let server = match args.server_dry_run {
        true => Some(server(&args).await?),
        false => None,
    };
    let harness = Harness::load_checked(&runtime, &file.name, wasm, config, &objects, server).await?;
    let keys = if !args.keys.is_empty() {
        Some(args.keys.iter().map(|k| fixtures::parse_key(k)).collect())
    } else {
        recording.as_ref().map(|r| vec![fixtures::parse_key(&r.key)])
    };
    let settle = args.until_settled.map(|rounds| (objects.as_slice(), rounds));
    let (report, settled) = offline::run_until_settled(&harness, keys, settle).await;
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
fn compare(args: &TestArgs, recording: Option<Recording>, report: &offline::Report) -> anyhow::Result<bool> {
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
async fn server(args: &TestArgs) -> anyhow::Result<Arc<dyn kubewasm_host::plugin::api::ApiWriter>> {
    let client = kubewasm_host::app::client(args.kubeconfig.as_deref(), args.context.as_deref())
        .await
        .context("--server-dry-run needs an API server")?;
    Ok(Arc::new(kubewasm_host::writer::KubeWriter::new(client).dry_run(true)))
}

#[cfg(test)]
mod tests {
    use crate::cli::{Cli, Command};
    use clap::Parser as _;

    #[test]
    fn test_runs_until_settled_within_10_reconciles_unless_told_how_many() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["kubewasm", "test", "p.wasm", "--objects", "o.yaml"], args].concat());
            let Command::Test(test) = cli.unwrap().command else { panic!("not test") };
            (test.until_settled, test.server_dry_run)
        };
        assert_eq!(parse(&[]), (None, false));
        assert_eq!(parse(&["--until-settled"]), (Some(10), false));
        assert_eq!(parse(&["--until-settled=3", "--server-dry-run"]), (Some(3), true));
        assert!(Cli::try_parse_from(["kubewasm", "test", "p.wasm", "--objects", "o", "--until-settled=0"]).is_err());
    }

    #[test]
    fn test_reads_the_time_plugins_see_as_rfc_3339_and_refuses_anything_else() {
        let now = |at: &str| {
            let cli = Cli::try_parse_from(["kubewasm", "test", "p.wasm", "--objects", "o.yaml", "--now", at]);
            cli.map(|cli| match cli.command {
                Command::Test(test) => test.now,
                _ => panic!("not test"),
            })
        };
        let at = now("2026-01-01T00:00:00Z").unwrap().unwrap();
        assert_eq!(at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(), 1_767_225_600);
        assert!(now("2026-01-01").is_err());
    }
}
