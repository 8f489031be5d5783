//! Every metric the dashboard and the alerting rules name exists on a running host, with every
//! label they select, group or match by. The PromQL is parsed (promql-parser, in
//! `tools/promql-uses`) out of
//! deploy/helm/kubewasm/files/ — the dashboard's panels and variables, the rules' expressions —
//! so no list here can drift from them. The hosts run the example plugins and fixtures that put
//! them in each state an alert watches: a memory-limit hit, forbidden calls, a rejected
//! version, a version over the memory budget, paced writes, a watch error and a relist (the
//! ConfigMapSync CRD deleted and applied again under its watch); a second host runs sharded for
//! the shard metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

use crate::chart_file;
use crate::common::examples::{self, CONVERGE, crd_established, deploy_dir};
use crate::common::process::{HostProcess, kubewasm_run};
use crate::common::{eventually, install_plugin, install_plugin_verbatim, run_ok, test_compile_cache};

/// Labels Prometheus adds when it scrapes (the target's), which no host exports.
const SCRAPE_LABELS: &[&str] = &["job", "instance"];

/// Families the dashboard shows whose samples only an event this test does not cause creates,
/// each with that event. They must still be named in the host's source, so a rename fails here.
/// Each is checked with its labels where its event happens: a WasmPlugin's conditions in
/// host/tests/all/wasmplugin.rs (these hosts serve plugin files), the API server's refusals in
/// host/tests/all/independence.rs (these hosts send as the admin, whom it never refuses).
const NOT_PROVOKED: &[(&str, &str)] = &[
    ("kubewasm_plugin_write_pushbacks_total", "the API server answering a plugin's request 429"),
    ("kubewasm_wasmplugin_condition", "a WasmPlugin, whose status has conditions"),
    ("kubewasm_plugin_apiserver_forbidden_total", "the API server refusing a request the host allowed"),
];

/// What the dashboard and rules select: metric → label → values an `=` matcher asks for (empty:
/// the label must only exist), with the labels of enclosing `by (…)` and `on (…)` clauses.
#[derive(Debug, Default)]
struct Uses {
    metrics: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

/// One query for `kubewasm-promql-uses`, a Grafana expression (its variables stand for any
/// value) or a rule's.
fn query(query: &str) -> Value {
    let query = query.replace("$__rate_interval", "5m");
    let query = ["$datasource", "$job", "$instance", "$plugin"].iter().fold(query, |q, v| q.replace(v, ".*"));
    // A variable's `label_values(selector, label)` is Grafana's, not PromQL.
    if let Some(inner) = query.strip_prefix("label_values(").and_then(|q| q.strip_suffix(')')) {
        let (selector, label) = inner.rsplit_once(',').unwrap();
        return json!({ "expr": selector, "grouping": [label.trim()] });
    }
    json!({ "expr": query, "grouping": [] })
}

/// What each of `queries` uses, as `tools/promql-uses` (promql-parser) reads it.
fn parse(queries: &[Value]) -> Vec<Value> {
    let tool = std::env::var_os("KUBEWASM_PROMQL_USES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("../debug/kubewasm-promql-uses"));
    assert!(
        tool.is_file(),
        "no {}: build it with `cargo build -p kubewasm-promql-uses` (`make test` does)",
        tool.display()
    );
    let mut child = std::process::Command::new(&tool)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(Value::Array(queries.to_vec()).to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

impl Uses {
    fn add(&mut self, parsed: &Value) {
        for (metric, labels) in parsed["metrics"].as_object().unwrap() {
            let entry = self.metrics.entry(metric.clone()).or_default();
            for (label, values) in labels.as_object().unwrap() {
                let seen = entry.entry(label.clone()).or_default();
                seen.extend(values.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()));
            }
        }
    }
}

/// Every metric and label the dashboard and the rules use.
fn used() -> Uses {
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(chart_file("kubewasm-dashboard.json")).unwrap()).unwrap();
    fn walk(value: &Value, queries: &mut Vec<Value>) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("expr" | "definition", Value::String(q)) if !q.is_empty() => queries.push(query(q)),
                        _ => walk(v, queries),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, queries)),
            _ => {}
        }
    }
    let mut queries = Vec::new();
    walk(&dashboard, &mut queries);
    let rules: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_file("kubewasm.rules.yaml")).unwrap()).unwrap();
    let rules: Vec<&Value> =
        rules["groups"].as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()).collect();
    let first_rule = queries.len();
    queries.extend(rules.iter().map(|rule| query(rule["expr"].as_str().unwrap())));
    let parsed = parse(&queries);
    let mut uses = Uses::default();
    parsed.iter().for_each(|p| uses.add(p));
    for (rule, parsed) in rules.iter().zip(&parsed[first_rule..]) {
        // `{{ $labels.x }}` in an annotation: x must be a label of the alert's series.
        let text = serde_json::to_string(&rule["annotations"]).unwrap();
        let kept: Option<BTreeSet<String>> = parsed["output_labels"]
            .as_array()
            .map(|labels| labels.iter().map(|l| l.as_str().unwrap().to_owned()).collect());
        for part in text.split("$labels.").skip(1) {
            let label: String = part.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            assert!(
                kept.as_ref().is_none_or(|l| l.contains(&label)),
                "{}: its annotations name {label}, which its expression drops",
                rule["alert"]
            );
        }
    }
    uses
}

/// metric → label → values seen, from Prometheus text exposition (`_bucket`, `_sum`, `_count`
/// series under their own names, as PromQL selects them).
fn exported(text: &str) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
        let entry = out.entry(name.to_owned()).or_default();
        for pair in labels.trim_end_matches('}').split("\",").filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once("=\"").unwrap();
            entry.entry(k.to_owned()).or_default().insert(v.trim_end_matches('"').to_owned());
        }
    }
    out
}

/// What `uses` names that `exported` lacks, one line each.
fn missing(uses: &Uses, exported: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<String> {
    let mut out = Vec::new();
    for (metric, labels) in &uses.metrics {
        if NOT_PROVOKED.iter().any(|(m, _)| m == metric) {
            continue;
        }
        let Some(series) = exported.get(metric) else {
            out.push(format!("{metric}: not exported"));
            continue;
        };
        for (label, values) in labels.iter().filter(|(l, _)| !SCRAPE_LABELS.contains(&l.as_str())) {
            match series.get(label) {
                None => out.push(format!("{metric}: no label {label}")),
                Some(seen) => out.extend(values.difference(seen).map(|v| format!("{metric}: no {label}=\"{v}\""))),
            }
        }
    }
    out
}

#[test]
fn the_dashboard_and_rules_name_metrics_through_selectors_this_test_reads() {
    // The parse finds what it should: a known selector, label matcher and grouping label each.
    let uses = used();
    let breaker = &uses.metrics["kubewasm_apiserver_breaker_open"];
    assert!(breaker.contains_key("instance"), "{breaker:?}");
    assert!(uses.metrics["kubewasm_plugin_limit_hits_total"]["limit"].contains("memory"));
    assert!(uses.metrics["controller_runtime_reconcile_time_seconds_bucket"].contains_key("controller"));
    assert!(uses.metrics.len() >= 30, "{:?}", uses.metrics.keys());
    // And `missing` reports what a scrape lacks.
    let scrape = "kubewasm_plugin_limit_hits_total{plugin=\"p\",limit=\"deadline\"} 1\n";
    let lacking = missing(&uses, &exported(scrape));
    assert!(lacking.contains(&"kubewasm_plugin_limit_hits_total: no limit=\"memory\"".to_owned()), "{lacking:?}");
    assert!(lacking.contains(&"kubewasm_apiserver_breaker_open: not exported".to_owned()), "{lacking:?}");
    for (metric, _) in NOT_PROVOKED {
        let named =
            std::process::Command::new("grep").args(["-rqF", metric]).arg(deploy_dir().join("../crates")).status();
        assert!(named.unwrap().success(), "{metric} is named nowhere in crates/");
    }
}

/// A plugin file `name` of fixture `built` with `config`, whatever it asks for approved.
fn fixture(dir: &Path, name: &str, built: &str, config: &str) {
    install_plugin(dir, name, built, config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_and_label_the_dashboard_and_alerts_use_is_exported_by_running_hosts() {
    let Some(cp) = ControlPlane::shared() else { return };
    let admin = cp.admin_client().await;
    let mut crds = cp.kubectl();
    crds.args(["apply", "--server-side", "-k"]).arg(deploy_dir().join("crds/examples"));
    run_ok(crds);
    crd_established(&admin, "configmapsyncs.examples.kubewasm.dev").await;

    let plugins = tempfile::tempdir().unwrap();
    examples::install_examples(plugins.path());
    // namespace-defaults paced to one write a second: its writes wait for tokens.
    let mut paced: Value = serde_yaml::from_str(&examples::example_config("namespace-defaults")).unwrap();
    paced["limits"] = json!({"deadlineMs": 5000, "writeQps": 1, "writeBurst": 1});
    std::fs::write(plugins.path().join("namespace-defaults.yaml"), serde_yaml::to_string(&paced).unwrap()).unwrap();
    // A reconcile that grows its memory past 16 MiB; one that calls what it may not; a config
    // that does not parse; a version whose instances × memory (16 × 1 GiB) pass the budget.
    fixture(plugins.path(), "bomb", "fixture_memory_bomb.wasm", "limits: {memoryBytes: 16777216}\n");
    fixture(plugins.path(), "forbidden", "fixture_forbidden.wasm", "");
    install_plugin_verbatim(plugins.path(), "broken", "fixture_counter.wasm", "grants: [not, a, mapping]\n");
    fixture(plugins.path(), "hog", "fixture_counter.wasm", "maxConcurrent: 16\nlimits: {memoryBytes: 1073741824}\n");

    let lease_ns = cp.namespace("kit-metrics-leases").await;
    let mut leader = kubewasm_run(plugins.path());
    leader.arg("--kubeconfig").arg(cp.kubeconfig_path()).arg("--compile-cache").arg(test_compile_cache());
    leader.args(["--wasm-plugins", "false", "--leader-elect", "--leader-election-namespace", &lease_ns]);
    leader.args(["--plugin-memory-budget", &(12u64 << 30).to_string()]);
    // Their logs (every refused and stopped reconcile of the fixtures) beside the test's files.
    let logs = tempfile::tempdir().unwrap();
    leader.stderr(std::fs::File::create(logs.path().join("leader.log")).unwrap());
    let mut leader = HostProcess::spawn(leader);

    let sharded_plugins = tempfile::tempdir().unwrap();
    let stamper = "grants:\n  write: [ConfigMap]\nsettings:\n  version: sharded\n  selector: \"kit-metrics=none\"\n";
    fixture(sharded_plugins.path(), "stamper", "fixture_stamper.wasm", stamper);
    let mut sharded = kubewasm_run(sharded_plugins.path());
    sharded.arg("--kubeconfig").arg(cp.kubeconfig_path()).arg("--compile-cache").arg(test_compile_cache());
    sharded.args(["--wasm-plugins", "false", "--sharding", "auto", "--leader-election-namespace", &lease_ns]);
    sharded.env("HOSTNAME", "kit-metrics-shard");
    sharded.stderr(std::fs::File::create(logs.path().join("sharded.log")).unwrap());
    let mut sharded = HostProcess::spawn(sharded);
    leader.ready(CONVERGE).await;
    sharded.ready(CONVERGE).await;

    // Work for every plugin: namespaces (namespace-defaults, paced), a ConfigMap (the bomb and
    // the forbidden fixture reconcile ConfigMaps), then the ConfigMapSync CRD deleted under
    // configmap-sync's watch (a watch error).
    for i in 0..3 {
        examples::create_namespace(&admin, &format!("kit-metrics-{i}"), json!({})).await;
    }
    let ns = cp.namespace("kit-metrics").await;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "work"}, "data": {"k": "v"}})).unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), &ns).create(&PostParams::default(), &cm).await.unwrap();
    examples::configmap_sync_converges(&admin, "kit-metrics").await;
    let mut delete = cp.kubectl();
    delete.args(["delete", "crd", "configmapsyncs.examples.kubewasm.dev"]);
    run_ok(delete);
    eventually("a watch error once the ConfigMapSync CRD is gone", CONVERGE, || async {
        leader.metric("kubewasm_informer_watch_errors_total", &[]).filter(|v| *v >= 1.0)
    })
    .await;
    // The CRD back: the cache lists again after its first sync (a relist).
    let mut crds = cp.kubectl();
    crds.args(["apply", "--server-side", "-k"]).arg(deploy_dir().join("crds/examples"));
    run_ok(crds);

    let uses = used();
    let deadline = tokio::time::Instant::now() + CONVERGE;
    let lacking = loop {
        // Each response's body: what follows the HTTP headers.
        let hosts = [&leader, &sharded];
        let bodies = hosts.iter().filter_map(|h| h.get("/metrics"));
        let text = bodies.filter_map(|r| r.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())).collect::<Vec<_>>();
        let text = text.join("\n");
        let lacking = missing(&uses, &exported(&text));
        if lacking.is_empty() || tokio::time::Instant::now() > deadline {
            break lacking;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        lacking.is_empty(),
        "named by the dashboard or the rules, not on the hosts' /metrics:\n{}",
        lacking.join("\n")
    );
}
