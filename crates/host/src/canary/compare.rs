//! Comparing one reconcile of the serving version with the candidate's: their intended writes,
//! normalized and order-insensitive, and a unified diff of both as YAML when they differ.

use serde_json::Value;

use crate::plugin::api::ApiCall;

/// Longest diff kept as a sample (status and Event stay small); longer ones are cut. 4 KiB.
pub const MAX_SAMPLE: usize = 4096;

/// One side of a comparison: what one version did for one key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Side {
    /// Why its reconcile failed, if it did.
    pub error: Option<String>,
    /// The writes (and Events) it made or meant to make, in order.
    pub writes: Vec<ApiCall>,
}

/// What a comparison found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The candidate meant to write what the serving version wrote.
    Same,
    /// Their writes (or outcomes) differ: a unified diff, serving → candidate.
    Differ(String),
    /// The candidate's reconcile failed where the serving version's did not.
    Failed(String),
}

impl Verdict {
    /// Bounded metric label: `same`, `differ` or `failed`.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Differ(_) => "differ",
            Verdict::Failed(_) => "failed",
        }
    }
}

/// Removes what legitimately changes between two reconciles of the same key moments apart: the
/// resourceVersion a write was based on (in an object, a patch body or a precondition).
fn strip_volatile(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                meta.remove("resourceVersion");
            }
            if let Some(Value::Object(pre)) = map.get_mut("preconditions") {
                pre.remove("resourceVersion");
                if pre.is_empty() {
                    map.remove("preconditions");
                }
            }
            map.values_mut().for_each(strip_volatile);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_volatile),
        _ => {}
    }
}

/// A side's writes as report values (the offline runner's rendering), without volatile fields,
/// sorted: two reconciles that make the same writes in another order are the same.
pub fn normalize(writes: &[ApiCall]) -> Vec<Value> {
    let mut values: Vec<(String, Value)> = writes
        .iter()
        .map(|w| {
            let mut v = w.to_value();
            strip_volatile(&mut v);
            (v.to_string(), v)
        })
        .collect();
    values.sort_by(|a, b| a.0.cmp(&b.0));
    values.into_iter().map(|(_, v)| v).collect()
}

fn render(side: &Side, writes: Vec<Value>) -> String {
    let mut shown = serde_json::json!({ "writes": writes });
    if let Some(error) = &side.error {
        shown["error"] = error.as_str().into();
    }
    serde_yaml::to_string(&shown).unwrap_or_default()
}

/// Cuts `text` to [`MAX_SAMPLE`] bytes on a character boundary, saying so.
pub fn truncate(mut text: String) -> String {
    if text.len() > MAX_SAMPLE {
        text.truncate(text.floor_char_boundary(MAX_SAMPLE));
        text.push_str("\n… (cut)\n");
    }
    text
}

/// Compares the serving version's reconcile of a key with the candidate's.
pub fn compare(serving: &Side, candidate: &Side) -> Verdict {
    if let (None, Some(error)) = (&serving.error, &candidate.error) {
        return Verdict::Failed(truncate(error.clone()));
    }
    let (old, new) = (normalize(&serving.writes), normalize(&candidate.writes));
    // Both failing counts as the same outcome; then only the writes are compared.
    if old == new && serving.error.is_some() == candidate.error.is_some() {
        return Verdict::Same;
    }
    let (old, new) = (render(serving, old), render(candidate, new));
    let diff = similar::TextDiff::from_lines(&old, &new);
    Verdict::Differ(truncate(diff.unified_diff().context_radius(3).header("serving", "candidate").to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::api::TypedObject;
    use serde_json::json;

    fn object(json: Value) -> TypedObject {
        TypedObject::from_json(json.to_string().as_bytes()).unwrap()
    }

    fn apply(name: &str, data: Value) -> ApiCall {
        ApiCall::Apply {
            object: object(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "a"}, "data": data}),
            ),
            force: true,
        }
    }

    fn side(writes: Vec<ApiCall>) -> Side {
        Side { error: None, writes }
    }

    #[test]
    fn the_same_writes_in_another_order_are_the_same() {
        let serving = side(vec![apply("x", json!({"k": "1"})), apply("y", json!({"k": "2"}))]);
        let candidate = side(vec![apply("y", json!({"k": "2"})), apply("x", json!({"k": "1"}))]);
        assert_eq!(compare(&serving, &candidate), Verdict::Same);
        assert_eq!(compare(&side(vec![]), &side(vec![])), Verdict::Same);
    }

    #[test]
    fn a_resource_version_the_write_was_based_on_does_not_count() {
        let with_rv = |rv: &str| ApiCall::Apply {
            object: object(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "resourceVersion": rv}}),
            ),
            force: false,
        };
        assert_eq!(compare(&side(vec![with_rv("1")]), &side(vec![with_rv("2")])), Verdict::Same);
    }

    #[test]
    fn a_different_write_gives_a_unified_diff_from_serving_to_candidate() {
        let serving = side(vec![apply("x", json!({"quota": "50"}))]);
        let candidate = side(vec![apply("x", json!({"quota": "10"}))]);
        let Verdict::Differ(diff) = compare(&serving, &candidate) else { panic!("they differ") };
        assert!(diff.contains("--- serving") && diff.contains("+++ candidate"), "{diff}");
        assert!(diff.contains("-      quota: '50'") && diff.contains("+      quota: '10'"), "{diff}");
        assert_eq!(compare(&serving, &side(vec![])).label(), "differ", "a missing write differs");
    }

    #[test]
    fn a_candidate_that_fails_where_the_serving_version_did_not_is_failed() {
        let serving = side(vec![apply("x", json!({}))]);
        let candidate = Side { error: Some("plugin trapped: unreachable".into()), writes: vec![] };
        assert_eq!(compare(&serving, &candidate), Verdict::Failed("plugin trapped: unreachable".into()));
        let both = Side { error: Some("conflict".into()), writes: vec![apply("x", json!({}))] };
        assert_eq!(compare(&both, &both), Verdict::Same, "failing alike is the same outcome");
        let Verdict::Differ(diff) = compare(&both, &serving) else { panic!("only the serving version failed") };
        assert!(diff.contains("-error: conflict"), "{diff}");
    }

    #[test]
    fn a_long_diff_is_cut_to_the_sample_size() {
        let big = "x".repeat(3 * MAX_SAMPLE);
        let Verdict::Differ(diff) = compare(&side(vec![apply("x", json!({"k": big}))]), &side(vec![])) else {
            panic!("they differ")
        };
        assert!(diff.len() <= MAX_SAMPLE + 16 && diff.ends_with("(cut)\n"), "{}", diff.len());
    }
}
