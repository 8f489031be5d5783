//! `kubewasm-promql-uses`: reads a JSON array of `{"expr": PromQL, "grouping": [label, …]}` on
//! stdin and prints, for each, the metrics it selects with the labels it matches, groups or
//! joins on (and the values an `=` matcher asks for), and the labels its result keeps when an
//! outer `by (…)` fixes them. The kit test (`host/tests/kit/metrics.rs`) checks them against a
//! running host.
//!
//! A binary of its own rather than a dev-dependency of the tests: promql-parser's build
//! dependencies (lrpar, cfgrammar, vergen) changed the workspace's feature resolution so that a
//! build without dev-dependencies (the demo's, `make install`) compiled 134 crates again after
//! the test build, instead of 24.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;

use anyhow::Context as _;
use promql_parser::label::MatchOp;
use promql_parser::parser::{self, Expr, LabelModifier, VectorSelector};
use serde_json::{Value, json};

/// metric → label → values an `=` matcher asks for (empty: the label must only exist).
type Uses = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn add(uses: &mut Uses, expr: &Expr, grouping: &[String]) {
    match expr {
        Expr::VectorSelector(vs) => selector(uses, vs, grouping),
        Expr::MatrixSelector(ms) => selector(uses, &ms.vs, grouping),
        Expr::Aggregate(agg) => {
            let mut inner = grouping.to_vec();
            if let Some(LabelModifier::Include(labels)) = &agg.modifier {
                inner.extend(labels.labels.iter().cloned());
            }
            add(uses, &agg.expr, &inner);
        }
        Expr::Binary(bin) => {
            let mut inner = grouping.to_vec();
            if let Some(LabelModifier::Include(labels)) = bin.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
                inner.extend(labels.labels.iter().cloned());
            }
            add(uses, &bin.lhs, &inner);
            add(uses, &bin.rhs, &inner);
        }
        Expr::Paren(p) => add(uses, &p.expr, grouping),
        Expr::Unary(u) => add(uses, &u.expr, grouping),
        Expr::Subquery(s) => add(uses, &s.expr, grouping),
        Expr::Call(call) => call.args.args.iter().for_each(|arg| add(uses, arg, grouping)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

fn selector(uses: &mut Uses, vs: &VectorSelector, grouping: &[String]) {
    let name = vs.name.clone().unwrap_or_default();
    let labels = uses.entry(name).or_default();
    for label in grouping.iter().filter(|l| *l != "le") {
        labels.entry(label.clone()).or_default();
    }
    for matcher in vs.matchers.matchers.iter().filter(|m| m.name != "__name__") {
        let values = labels.entry(matcher.name.clone()).or_default();
        if matches!(matcher.op, MatchOp::Equal) && !matcher.value.is_empty() {
            values.insert(matcher.value.clone());
        }
    }
}

/// The labels an expression's result keeps, when an outer `by (…)` fixes them.
fn output_labels(expr: &Expr) -> Option<BTreeSet<String>> {
    match expr {
        Expr::Aggregate(agg) => match &agg.modifier {
            Some(LabelModifier::Include(labels)) => Some(labels.labels.iter().cloned().collect()),
            _ => None,
        },
        Expr::Binary(bin) => output_labels(&bin.lhs),
        Expr::Paren(p) => output_labels(&p.expr),
        _ => None,
    }
}

fn main() -> anyhow::Result<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let queries: Vec<Value> = serde_json::from_str(&input).context("stdin: a JSON array of {expr, grouping}")?;
    let mut out = Vec::new();
    for query in queries {
        let text = query["expr"].as_str().context("a query without an expr")?;
        let grouping: Vec<String> =
            query["grouping"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect();
        let expr = parser::parse(text).map_err(|e| anyhow::anyhow!("{text}: {e}"))?;
        let mut uses = Uses::new();
        add(&mut uses, &expr, &grouping);
        out.push(json!({ "metrics": uses, "output_labels": output_labels(&expr) }));
    }
    println!("{}", Value::Array(out));
    Ok(())
}
