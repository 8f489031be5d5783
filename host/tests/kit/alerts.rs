//! The alerting rules (deploy/helm/kubewasm/files/kubewasm.rules.yaml) with the real
//! `promtool`: they check, every alert has a unit test in which it fires and one in which it
//! stays silent, and those unit tests pass.

use std::collections::BTreeMap;
use std::process::Command;

use kubewasm_testenv::Tool;
use serde_json::Value;

use crate::chart_file;

fn yaml(file: &str) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(chart_file(file)).unwrap()).unwrap()
}

#[test]
fn promtool_checks_the_rules_file_clean() {
    let Some(promtool) = Tool::Promtool.locate_or_skip() else { return };
    let out = Command::new(promtool)
        .args(["check", "rules", "--lint-fatal"])
        .arg(chart_file("kubewasm.rules.yaml"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool check rules:\n{text}");
    assert!(text.contains("SUCCESS: 8 rules found"), "{text}");
}

#[test]
fn every_alert_fires_in_a_promtool_test_and_stays_silent_in_another_and_the_tests_pass() {
    let alerts: Vec<String> = yaml("kubewasm.rules.yaml")["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect();
    // alert → (cases where it fires, cases where it is silent)
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for test in yaml("kubewasm.rules.test.yaml")["tests"].as_array().unwrap() {
        for case in test["alert_rule_test"].as_array().into_iter().flatten() {
            let entry = cases.entry(case["alertname"].as_str().unwrap().to_owned()).or_default();
            let fired = case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
            if fired { entry.0 += 1 } else { entry.1 += 1 }
        }
    }
    for alert in &alerts {
        let (fires, silent) = cases.get(alert).copied().unwrap_or_default();
        assert!(fires > 0 && silent > 0, "{alert}: {fires} cases where it fires, {silent} where it is silent");
    }
    assert!(alerts.len() >= 6, "{alerts:?}");

    let Some(promtool) = Tool::Promtool.locate_or_skip() else { return };
    let out =
        Command::new(promtool).args(["test", "rules"]).arg(chart_file("kubewasm.rules.test.yaml")).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("SUCCESS"), "promtool test rules:\n{text}");
}

#[test]
fn promtool_fails_a_rules_test_whose_expected_alert_does_not_fire() {
    // The unit tests above can fail: the same file with one alert's threshold moved past its
    // test's series makes promtool report the missing alert.
    let Some(promtool) = Tool::Promtool.locate_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rules = std::fs::read_to_string(chart_file("kubewasm.rules.yaml")).unwrap();
    let moved = rules.replace("          > 0.1\n", "          > 0.9\n");
    assert_ne!(moved, rules, "the reconcile-error threshold is where this test expects it");
    std::fs::write(dir.path().join("kubewasm.rules.yaml"), moved).unwrap();
    std::fs::copy(chart_file("kubewasm.rules.test.yaml"), dir.path().join("kubewasm.rules.test.yaml")).unwrap();
    let out = Command::new(promtool)
        .args(["test", "rules"])
        .arg(dir.path().join("kubewasm.rules.test.yaml"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("KubewasmReconcileErrors"), "{text}");
}
