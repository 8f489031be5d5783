//! The book (`docs/`) checked against this build, so it cannot drift from the binary:
//!
//! - each getting-started page's tested commands (fenced blocks whose info string is
//!   `sh,test`) run, joined into one `bash -e` script per page, in an empty directory outside
//!   the checkout with this build's `kubewasm` first on the PATH, as an author has it after
//!   `make install` (`common::project::Installed`): scaffold, build, offline `kubewasm test`
//!   for Rust, Python and JavaScript, and the Go example's build and offline test; the same for
//!   the guide that deploys the host as its ServiceAccount on a local control plane
//!   (```` ```sh,test-deploy ````), with `kubewasm manifests` and `kubewasm dev
//!   --control-plane-only`, nothing from the checkout;
//! - the CLI reference (`docs/src/reference/cli.md`, `host-flags.md`) is every verb's `--help`
//!   as the binary prints it (`KUBEWASM_BLESS=1` rewrites the pages after a flag changed);
//! - the metrics reference names every metric the host's source registers.
//!
//! The Python, JavaScript and Go pages use the toolchains `make test` installs (`make plugins`:
//! `$KUBEWASM_TOOLS`, the Go component tool in the target dir) and fail, saying so, without
//! them. The Rust page builds offline (`CARGO_NET_OFFLINE`) into the target dir
//! `host/tests/all/new.rs` uses, so the SDK and k8s-openapi compile for wasm32-wasip2 once.
//! Running against a cluster (`kubewasm dev`) is left to `host/tests/all/new.rs` and
//! `dev.rs`, which serve the same scaffolds on a real API server.

#[allow(dead_code)]
#[path = "common/project.rs"]
mod project;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use project::Installed;

/// Runs `command`, panics with its output unless it succeeds; returns stdout and stderr.
fn run_ok(mut command: Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{command:?} failed ({}):\n{text}", out.status);
    text
}

fn docs() -> PathBuf {
    project::checkout().join("docs/src")
}

/// The commands of `page`'s ```` ```sh,test ```` blocks, in order, and of its
/// ```` ```sh,test-cluster ```` blocks: their first line (`kubewasm dev …`, which runs until
/// Ctrl-C) started in the background (`exec`, so that the signal reaches it, not a subshell),
/// each other line retried for up to two minutes while it
/// fails (the plugin reconciles a moment after the control plane is up), and the first line's
/// process stopped with SIGTERM when the script ends.
fn tested_commands(page: &str) -> String {
    let text = std::fs::read_to_string(docs().join(page)).unwrap();
    let mut script = String::new();
    let mut block: Option<(bool, Vec<&str>)> = None;
    for line in text.lines() {
        match &mut block {
            Some((cluster, lines)) if line.trim_start().starts_with("```") => {
                if *cluster {
                    script.push_str(&cluster_script(lines));
                } else {
                    lines.iter().for_each(|l| script.push_str(&format!("{l}\n")));
                }
                block = None;
            }
            Some((_, lines)) => lines.push(line),
            None if matches!(line.trim(), "```sh,test" | "```sh,test-deploy") => block = Some((false, Vec::new())),
            None if line.trim() == "```sh,test-cluster" => block = Some((true, Vec::new())),
            None => {}
        }
    }
    assert!(block.is_none(), "{page}: a ```sh,test block is not closed");
    script
}

/// A `sh,test-cluster` block as a script (see [`tested_commands`]).
fn cluster_script(lines: &[&str]) -> String {
    let (server, rest) = lines.split_first().expect("a test-cluster block has a first line");
    let mut script = format!(
        "kw_log=$(mktemp)\n{{ exec {server}\n}} >\"$kw_log\" 2>&1 &\nkw_server=$!\n\
         trap 'kill -TERM $kw_server 2>/dev/null; wait $kw_server || {{ echo \"stopped with SIGTERM, it exited $?\" >&2; cat \"$kw_log\" >&2; exit 1; }}' EXIT\n\
         kw_retry() {{ for _ in $(seq 600); do eval \"$1\" && return 0; \
         kill -0 $kw_server 2>/dev/null || break; sleep 0.2; done; cat \"$kw_log\" >&2; return 1; }}\n"
    );
    for line in rest.iter().filter(|l| !l.trim().is_empty()) {
        script.push_str(&format!("kw_retry '{}'\n", line.replace('\'', r"'\''")));
    }
    script
}

/// Runs `page`'s tested commands in an empty directory; checks they include `must` first.
fn run_page(page: &str, must: &[&str], setup: impl FnOnce(&Installed, &mut Command)) {
    // What a page starts in the background (`&`) is stopped when its script ends.
    let stop = "trap 'for job in $(jobs -p); do kill $job 2>/dev/null || true; done; wait' EXIT";
    let script = format!("{stop}\n{}", tested_commands(page));
    for command in must {
        assert!(script.contains(command), "{page} runs no `{command}` in a ```sh,test block:\n{script}");
    }
    let kubewasm = Installed::new();
    let dir = tempfile::tempdir().unwrap();
    let mut bash = kubewasm.command("bash", dir.path());
    bash.args(["-e", "-o", "pipefail", "-x", "-c", &script]);
    // The compiled components of every run, kept so that a second run compiles nothing.
    bash.env("KUBEWASM_COMPILE_CACHE", Path::new(env!("CARGO_TARGET_TMPDIR")).join("book-compile-cache"));
    bash.env("KUBECONFIG", "/nonexistent");
    setup(&kubewasm, &mut bash);
    run_ok(bash);
}

/// The kubectl `make control-plane` built, where `kubewasm dev` finds its control plane.
fn kubectl() -> Option<PathBuf> {
    let cache = std::env::var_os("KUBEBUILDER_ASSETS").map(PathBuf::from).unwrap_or_else(|| {
        let root = std::env::var_os("KUBEWASM_K8S_CACHE").map(PathBuf::from);
        let home = || PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/kubewasm/k8s");
        root.unwrap_or_else(home).join(kubewasm_testenv::DEFAULT_K8S_VERSION)
    });
    Some(cache.join("kubectl")).filter(|k| k.is_file())
}

#[test]
fn the_rust_getting_started_commands_scaffold_build_test_offline_and_reconcile_under_kubewasm_dev() {
    let must = ["kubewasm new rust", "./build.sh", "kubewasm test", "kubewasm dev", "get configmap welcome"];
    let kubectl = kubectl().expect("no kubectl: build the control plane with `make control-plane` (`make test` does)");
    run_page("getting-started/rust.md", &must, |kubewasm, bash| {
        kubewasm.add(&kubectl);
        bash.env("CARGO_TARGET_DIR", project::rust_target_dir()).env("CARGO_NET_OFFLINE", "true");
        // Any free port for `kubewasm dev`'s admin server: 8080 may be taken on a shared machine.
        bash.env("KUBEWASM_ADMIN_ADDR", "127.0.0.1:0");
    });
}

#[test]
fn the_service_account_guide_deploys_the_host_from_the_installed_binary_outside_the_checkout() {
    let must = [
        "kubewasm dev --control-plane-only",
        "kubewasm manifests |",
        "kubewasm rbac",
        "kubewasm run",
        "get configmap welcome",
    ];
    let kubectl = kubectl().expect("no kubectl: build the control plane with `make control-plane` (`make test` does)");
    run_page("guides/run-as-serviceaccount.md", &must, |kubewasm, bash| {
        kubewasm.add(&kubectl);
        bash.env("CARGO_TARGET_DIR", project::rust_target_dir()).env("CARGO_NET_OFFLINE", "true");
        bash.env("KUBEWASM_ADMIN_ADDR", "127.0.0.1:0");
    });
}

#[test]
fn the_python_getting_started_commands_test_the_source_and_build_the_component_and_pass_the_offline_tests() {
    project::python_toolchain();
    let must = ["kubewasm new python hello-py", "kubewasm test hello-py.py", "--component", "./build.sh"];
    run_page("getting-started/python.md", &must, |_, _| {});
}

#[test]
fn the_javascript_getting_started_commands_test_the_source_and_build_the_component_and_pass_the_offline_tests() {
    project::js_toolchain();
    let must = ["kubewasm new js hello-js", "kubewasm test hello-js.js", "--component", "./build.sh"];
    run_page("getting-started/javascript.md", &must, |_, _| {});
}

#[test]
fn the_go_getting_started_commands_build_the_example_and_pass_the_offline_test() {
    project::js_toolchain(); // the WASI adapter comes with it
    // `make go-plugins` builds it into this target dir; `$KUBEWASM_GO_COMPONENT` names another.
    let tool = std::env::var_os("KUBEWASM_GO_COMPONENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("../debug/kubewasm-go-component"));
    assert!(tool.is_file(), "no {}: build it with `make go-plugins` (`make test` does)", tool.display());
    let must = ["go build", "kubewasm-go-component", "kubewasm check", "kubewasm test", "--expect"];
    run_page("getting-started/go.md", &must, |kubewasm, bash| {
        kubewasm.add(&tool);
        bash.env("KUBEWASM_SRC", project::checkout()).env("KUBEWASM_TOOLS", project::tools_dir());
    });
}

/// The verbs `kubewasm --help` lists (without `help`).
fn verbs(kubewasm: &Path) -> Vec<String> {
    let help = help(kubewasm, &[]);
    let commands = help.split("Commands:\n").nth(1).expect("kubewasm --help lists commands");
    commands
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .map(str::to_owned)
        .collect()
}

/// `kubewasm ARGS --help`, in an environment without `KUBEWASM_*` variables (clap prints their
/// values beside the flags) and with a fixed HOME, so the text is the same on every machine.
fn help(kubewasm: &Path, args: &[&str]) -> String {
    let mut command = Command::new(kubewasm);
    command.args(args).arg("--help").env_clear().env("HOME", "/home/you").env("PATH", "/usr/bin:/bin");
    run_ok(command)
}

/// What `docs/src/reference/cli.md` and `host-flags.md` must hold: each verb's `--help`.
fn cli_reference(kubewasm: &Path) -> (String, String) {
    let mut cli = String::from(
        "# CLI\n\n\
         <!-- Generated from the binary by host/tests/book.rs (`KUBEWASM_BLESS=1 cargo test -p kubewasm \
         --test book` rewrites it); edit the doc comments in host/src/commands/, not this page. -->\n\n\
         Every verb of `kubewasm` with its `--help`, as this version prints it. Every flag also \
         reads the `KUBEWASM_*` environment variable shown beside it. `kubewasm run`'s flags, the \
         host's, are on their own page: [host flags](host-flags.md).\n\n## `kubewasm`\n\n```text\n",
    );
    cli.push_str(&help(kubewasm, &[]));
    cli.push_str("```\n");
    let mut flags = String::new();
    for verb in verbs(kubewasm) {
        let text = help(kubewasm, &[&verb]);
        if verb == "run" {
            flags = format!(
                "# Host flags (`kubewasm run`)\n\n\
                 <!-- Generated from the binary by host/tests/book.rs (`KUBEWASM_BLESS=1 cargo test -p \
                 kubewasm --test book` rewrites it); edit the doc comments in host/src/commands/run.rs. -->\n\n\
                 What the host runs with: `kubewasm run --help`, as this version prints it. `kubewasm dev` \
                 takes every one of these flags too. The container image sets `KUBEWASM_PLUGINS`, \
                 `KUBEWASM_ADMIN_ADDR` and `KUBEWASM_COMPILE_CACHE` \
                 ([Deploying with kustomize](../guides/deploy-kustomize.md)).\n\n```text\n{text}```\n"
            );
            cli.push_str("\n## `kubewasm run`\n\nThe host: its flags are the [host flags](host-flags.md).\n");
        } else {
            cli.push_str(&format!("\n## `kubewasm {verb}`\n\n```text\n{text}```\n"));
        }
    }
    assert!(!flags.is_empty(), "kubewasm --help lists no `run`");
    (cli, flags)
}

#[test]
fn the_cli_reference_is_every_verbs_help_as_the_binary_prints_it() {
    let kubewasm = Path::new(env!("CARGO_BIN_EXE_kubewasm"));
    let (cli, flags) = cli_reference(kubewasm);
    let bless = std::env::var_os("KUBEWASM_BLESS").is_some();
    let mut stale = Vec::new();
    for (page, want) in [("reference/cli.md", cli), ("reference/host-flags.md", flags)] {
        let path = docs().join(page);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
            if bless {
                std::fs::write(&path, want).unwrap();
            } else {
                stale.push(page);
            }
        }
    }
    assert!(
        stale.is_empty(),
        "docs/src/{stale:?} differ from the binary's --help: `KUBEWASM_BLESS=1 cargo test -p kubewasm --test book \
         the_cli_reference` rewrites them (then read the diff)"
    );
}

/// The flags a `--help` text defines (its option lines: `  -p, --plugins <DIR>`,
/// `      --leader-elect`).
fn flags_defined(help: &str) -> BTreeSet<String> {
    let mut defined = BTreeSet::new();
    for line in help.lines() {
        // Option lines are indented 2 (`  -p, --plugins`) or 6 (`      --leader-elect`) columns,
        // their descriptions 10.
        let option = line.trim_start();
        if !option.starts_with('-') || line.len() - option.len() > 6 {
            continue;
        }
        let long = option.split_once(", ").map_or(option, |(_, long)| long);
        if let Some(long) = long.strip_prefix("--") {
            defined.insert(flag_name(long));
        }
    }
    defined
}

fn flag_name(s: &str) -> String {
    s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect()
}

/// The `--flags` a `--help` text names, each with the command it belongs to: `None` for the
/// command's own (in the text, or a code span that starts with the flag: `` `--sign-key` ``);
/// `Some(verb)` in a code span that names another verb (`` `push --sign-key` ``, `` `kubewasm
/// run --compiler` ``). A code span that starts with another program (`` `node --test` ``,
/// `` `cosign sign --key` ``) names that program's flags, which are not checked.
fn flags_named(help: &str, verbs: &[String]) -> Vec<(Option<String>, String)> {
    let flags = |text: &str| -> Vec<String> {
        text.split_whitespace().filter_map(|t| t.strip_prefix("--")).map(flag_name).filter(|n| !n.is_empty()).collect()
    };
    let mut named = Vec::new();
    for (i, part) in help.split('`').enumerate() {
        let mut words = part.split_whitespace();
        let owner = match words.next() {
            _ if i % 2 == 0 => None,
            Some(first) if first.starts_with("--") => None,
            Some("kubewasm") => words.next().map(str::to_owned),
            Some(first) if verbs.iter().any(|v| v == first) => Some(first.to_owned()),
            _ => continue,
        };
        named.extend(flags(part).into_iter().map(|f| (owner.clone(), f)));
    }
    named
}

#[test]
fn every_flag_a_help_text_names_exists() {
    let kubewasm = Path::new(env!("CARGO_BIN_EXE_kubewasm"));
    let global = flags_defined(&help(kubewasm, &[]));
    let verbs = verbs(kubewasm);
    let defined: Vec<BTreeSet<String>> = verbs.iter().map(|v| flags_defined(&help(kubewasm, &[v]))).collect();
    let of = |verb: &str| &defined[verbs.iter().position(|v| v == verb).unwrap_or_else(|| panic!("no verb {verb}"))];
    let mut wrong = Vec::new();
    for verb in &verbs {
        assert!(of(verb).contains("help"), "{verb}: no option lines found");
        for (owner, flag) in flags_named(&help(kubewasm, &[verb]), &verbs) {
            let owner = owner.as_deref().unwrap_or(verb);
            if !of(owner).contains(&flag) && !global.contains(&flag) {
                wrong.push(format!("{verb} names `{owner} --{flag}`"));
            }
        }
    }
    assert!(wrong.is_empty(), "help texts name flags that do not exist: {wrong:?}");
}

/// Every metric name registered in the host's sources (not their tests): string literals that
/// start like a metric, and the informer's, named by `opts("…")` under `kubewasm_informer_`.
fn registered_metrics() -> BTreeSet<String> {
    const PREFIXES: [&str; 4] = ["kubewasm_", "controller_runtime_", "workqueue_", "leader_election_"];
    let mut names = BTreeSet::new();
    let roots = ["crates/host/src", "crates/runtime/src", "crates/informer/src", "crates/queue/src", "host/src"];
    for file in roots.iter().flat_map(|r| project::files_under(&project::checkout().join(r))) {
        if file.extension().is_none_or(|e| e != "rs") || file.to_string_lossy().contains("tests") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (at, _) in code.match_indices('"') {
            let rest = &code[at + 1..];
            let end = rest.find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(rest.len());
            let (name, after) = rest.split_at(end);
            if after.starts_with('"') && PREFIXES.iter().any(|p| name.starts_with(p) && name.len() > p.len()) {
                names.insert(name.to_owned());
            }
        }
        if file.ends_with("crates/informer/src/metrics.rs") {
            for part in code.split("opts(\"").skip(1) {
                names.insert(format!("kubewasm_informer_{}", part.split('"').next().unwrap()));
            }
        }
    }
    names
}

#[test]
fn the_metrics_reference_names_every_metric_the_host_registers() {
    let page = std::fs::read_to_string(docs().join("reference/metrics.md")).unwrap();
    let names = registered_metrics();
    assert!(names.len() > 40 && names.contains("kubewasm_informer_objects"), "{names:?}");
    let missing: Vec<_> = names.iter().filter(|n| !page.contains(&format!("`{n}`"))).collect();
    assert!(missing.is_empty(), "docs/src/reference/metrics.md does not name {missing:?}");
}
