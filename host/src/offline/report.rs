//! What an offline run reports: one entry per `map` that wrote or failed and per `reconcile`,
//! with the writes and Events it would have made, as YAML; and its comparison with an
//! expected report.

use serde::Serialize;
use serde_json::Value;

use super::{Error, Result};

/// The entries of an offline run, in call order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report(pub Vec<Value>);

impl Report {
    /// The report as YAML (a sequence of entries; keys sorted, so it is stable).
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(&self.0).unwrap_or_else(|e| format!("# cannot render the report: {e}\n"))
    }

    /// The report as one JSON value.
    pub fn to_value(&self) -> Value {
        Value::Array(self.0.clone())
    }
}

/// How an actual report differs from the expected one: a unified diff of both as YAML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diff(pub String);

impl std::fmt::Display for Diff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Compares `actual` with `expected` (YAML text, or the `expect` of a recording) as values, so
/// formatting and key order do not count; `None` when they are equal.
pub fn diff(expected: &Value, actual: &Report) -> Option<Diff> {
    let actual_value = actual.to_value();
    if *expected == actual_value {
        return None;
    }
    let expected = serde_yaml::to_string(expected).unwrap_or_default();
    let actual = actual.to_yaml();
    let text = similar::TextDiff::from_lines(&expected, &actual);
    Some(Diff(text.unified_diff().context_radius(4).header("expected", "actual").to_string()))
}

/// Parses an expected report (YAML).
pub fn parse_expected(text: &str) -> Result<Value> {
    let value: Value = serde_yaml::from_str(text).map_err(|e| Error::Fixture(format!("expected report: {e}")))?;
    Ok(if value.is_null() { Value::Array(Vec::new()) } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_reports_have_no_diff_whatever_their_formatting() {
        let report = Report(vec![json!({"reconcile": "a", "result": "done", "writes": []})]);
        let expected = parse_expected("- writes: []\n  result: done\n  reconcile: a\n").unwrap();
        assert_eq!(diff(&expected, &report), None);
    }

    #[test]
    fn a_different_report_gives_a_unified_diff_of_the_yaml() {
        let report = Report(vec![json!({"reconcile": "a", "result": "done", "writes": [{"delete": {"key": "x"}}]})]);
        let expected = parse_expected("- reconcile: a\n  result: done\n  writes: []\n").unwrap();
        let diff = diff(&expected, &report).unwrap().to_string();
        assert!(diff.contains("--- expected") && diff.contains("+++ actual"), "{diff}");
        assert!(diff.contains("-  writes: []"), "{diff}");
        assert!(diff.contains("+  - delete:"), "{diff}");
    }
}
