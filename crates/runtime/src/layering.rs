//! The layering rule inside the runtime: each module imports only the layers below its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The check, shared with the host library (`crates/host/src/layering.rs`).
#[path = "layering/rule.rs"]
mod rule;

#[test]
fn every_module_has_a_layer_and_imports_only_layers_below_it() {
    let problems = rule::check(Path::new(env!("CARGO_MANIFEST_DIR")), "kubewasm-runtime");
    assert!(problems.is_empty(), "against kubewasm-runtime's layers in ARCHITECTURE.md:\n{}", problems.join("\n"));
}

/// A crate made of `files` (paths under `src/`) checked against `table`'s rows, as
/// `| n | modules | imports inside the layer |`.
fn problems(files: &[(&str, &str)], rows: &[&str]) -> Vec<String> {
    let doc = format!("| layer | `demo` modules | inside | what |\n|---|---|---|---|\n{}\n", rows.join(" |\n") + " |");
    let table = rule::Table::parse(&doc, "demo").unwrap();
    let files: BTreeMap<PathBuf, String> =
        files.iter().map(|(path, text)| (Path::new("src").join(path), text.to_string())).collect();
    let krate = rule::Crate::read(Path::new("src/lib.rs"), |p| files.get(p).cloned()).unwrap();
    rule::problems(&table, &krate, Path::new("src"))
}

const LIB: &str = "pub mod low;\npub mod mid;\npub mod high;\n#[cfg(test)]\nmod layering;\n";
const ROWS: &[&str] = &["| 0 | `low` | —", "| 1 | `mid` | —", "| 2 | `high` | —"];

#[test]
fn imports_of_layers_below_pass() {
    let files = [
        ("lib.rs", LIB),
        ("low.rs", "//! Low.\npub struct A;"),
        ("mid.rs", "use crate::low::A;\n/// [`A`](crate::low::A)\npub fn f(_: A) {}"),
        ("high.rs", "use super::{low, mid::f};\nmod tests { use super::super::mid; }"),
    ];
    assert_eq!(problems(&files, ROWS), Vec::<String>::new());
}

#[test]
fn an_import_of_a_layer_above_is_found_however_it_is_written() {
    let upward = [
        "use crate::high::X;",
        "use crate::{mid, high};",
        "use crate::{mid::{self, f}, high::X};",
        "use super::high;",
        "fn f() { let _ = crate::high::g(); }",
        "/// [`X`](crate::high::X)\npub struct Y;",
        "#[cfg(test)]\nmod tests {\n    use super::super::high::X;\n}",
    ];
    for text in upward {
        let files = [("lib.rs", LIB), ("low.rs", text), ("mid.rs", ""), ("high.rs", "")];
        let found = problems(&files, ROWS);
        assert!(found.iter().any(|p| p.contains("`low` (layer 0) imports `high` (layer 2)")), "{text}: {found:?}");
    }
}

#[test]
fn a_super_path_that_stays_inside_its_module_is_no_import() {
    let files = [
        ("lib.rs", LIB),
        ("low.rs", "mod body;\nmod inner { use super::A; }\npub struct A;"),
        ("low/body.rs", "use super::A;\nmod tests { use super::super::A; }"),
        ("mid.rs", ""),
        ("high.rs", ""),
    ];
    assert_eq!(problems(&files, ROWS), Vec::<String>::new());
    let files = [
        ("lib.rs", LIB),
        ("low.rs", "mod body;"),
        ("low/body.rs", "use super::super::high;"),
        ("mid.rs", ""),
        ("high.rs", ""),
    ];
    assert_eq!(problems(&files, ROWS), ["low/body.rs:1: `low` (layer 0) imports `high` (layer 2), a layer above"]);
}

#[test]
fn strings_and_plain_comments_import_nothing() {
    let text = "// crate::high\n/* crate::high */\nconst S: &str = \"crate::high\";\nconst R: &str = r#\"crate::high\"#;\nfn f<'a>(c: char) -> bool { c == '\"' }";
    let files = [("lib.rs", LIB), ("low.rs", text), ("mid.rs", ""), ("high.rs", "")];
    assert_eq!(problems(&files, ROWS), Vec::<String>::new());
}

#[test]
fn a_module_without_a_layer_and_a_row_without_a_module_are_both_found() {
    let lib = "pub mod low;\npub mod mid;\npub mod new;\npub use other_crate as high;\n";
    let files = [("lib.rs", lib), ("low.rs", ""), ("mid.rs", ""), ("new.rs", "")];
    let rows = ["| 0 | `low` | —", "| 1 | `mid`, `gone` | —", "| 2 | `high` | —"];
    assert_eq!(
        problems(&files, &rows),
        [
            "module `new` has no layer in ARCHITECTURE.md's table",
            "ARCHITECTURE.md's table lists `gone`, which is no module of the crate",
        ]
    );
}

#[test]
fn an_import_inside_a_layer_needs_its_row_to_allow_it() {
    let files = [("lib.rs", LIB), ("low.rs", "use crate::mid;"), ("mid.rs", ""), ("high.rs", "")];
    let rows = ["| 0 | `low`, `mid` | —", "| 1 | `high` | —"];
    assert_eq!(
        problems(&files, &rows),
        ["low.rs:1: `low` (layer 0) imports `mid` (layer 0), its own layer, and the row has no `low` → `mid`"]
    );
    let rows = ["| 0 | `low`, `mid` | `low` → `mid`", "| 1 | `high` | —"];
    assert_eq!(problems(&files, &rows), Vec::<String>::new());
    let rows = ["| 0 | `low`, `mid` | `low` → `mid`, `mid` → `low`", "| 1 | `high` | —"];
    assert_eq!(problems(&files, &rows), ["ARCHITECTURE.md's table allows `mid` → `low`, which no import uses"]);
}

#[test]
fn a_layer_said_to_be_one_cycle_must_be_one() {
    let rows = ["| 0 | `low`, `mid` | any: one cycle today", "| 1 | `high` | —"];
    let files = [("lib.rs", LIB), ("low.rs", "use crate::mid;"), ("mid.rs", "use crate::low;"), ("high.rs", "")];
    assert_eq!(problems(&files, &rows), Vec::<String>::new());
    let files = [("lib.rs", LIB), ("low.rs", "use crate::mid;"), ("mid.rs", ""), ("high.rs", "")];
    assert_eq!(problems(&files, &rows), ["layer 0 is one cycle in ARCHITECTURE.md, but `mid` is not on `low`'s cycle"]);
}

#[test]
fn lib_rs_items_are_the_row_crate_and_its_uses_lead_to_their_module() {
    let lib = "pub mod low;\npub mod mid;\npub mod high;\npub use high::{Thing as Renamed};\npub use other::Key;\npub struct Top;\n";
    let mid = "use crate::Renamed;\nuse crate::Key;\nuse super::Top;";
    let files = [("lib.rs", lib), ("low.rs", ""), ("mid.rs", mid), ("high.rs", "")];
    assert_eq!(
        problems(&files, ROWS),
        [
            "mid.rs:1: `mid` (layer 1) imports `high` (layer 2), a layer above",
            "mid.rs:3: `mid` names lib.rs's `Top`, and `crate` has no layer",
        ]
    );
    let rows = ["| 0 | `low` | —", "| 1 | `high` | —", "| 2 | `mid`, `crate` | `mid` → `crate`"];
    assert_eq!(problems(&files, &rows), Vec::<String>::new());
}

#[test]
fn a_table_that_does_not_say_what_the_rule_reads_is_refused() {
    let parse =
        |rows: &str| rule::Table::parse(&format!("| layer | `demo` modules | x | y |\n|-|-|-|-|\n{rows}"), "demo");
    assert!(parse("| 0 | `a` | — | |\n| 1 | `b` | — | |").is_ok());
    assert!(parse("| 0 | `a` | — | |\n| 2 | `b` | — | |").unwrap_err().contains("numbered"));
    assert!(parse("| 0 | `a` (the A) | — | |").unwrap_err().contains("modules are"));
    assert!(parse("| 0 | `a` | — | |\n| 1 | `a` | — | |").unwrap_err().contains("two layers"));
    assert!(parse("| 0 | `a` | — | |\n| 1 | `b` | `b` → `a` | |").unwrap_err().contains("another layer"));
    assert!(parse("| 0 | `a`, `b` | a imports b | |").unwrap_err().contains("imports inside"));
    assert!(rule::Table::parse("no table", "demo").unwrap_err().contains("no table"));
}
