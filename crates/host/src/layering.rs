//! The layering rule inside the host library: each module imports only the layers below its own.

use std::path::Path;

/// The check, shared with the runtime, whose `layering.rs` also holds the check's own tests.
#[path = "../../runtime/src/layering/rule.rs"]
mod rule;

#[test]
fn every_module_has_a_layer_and_imports_only_layers_below_it() {
    let problems = rule::check(Path::new(env!("CARGO_MANIFEST_DIR")), "kubewasm-host");
    assert!(problems.is_empty(), "against kubewasm-host's layers in ARCHITECTURE.md:\n{}", problems.join("\n"));
}
