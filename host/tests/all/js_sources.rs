//! Plugins given as JavaScript source on the host's shared JavaScript engine, against a real
//! kube-apiserver + etcd, as `sources` tests the Python ones: a broken source is a load error at
//! its file and line while the version before keeps serving, and each language's plugins compile
//! their own engine once. (That the source leaves the same state as the component builds is
//! `languages::the_javascript_source_…`.)
//!
//! The plugin is `plugins/js/namespace-defaults/namespace-defaults.js`, the file the packaged
//! build bundles (an ES module importing the SDK by its repository path), confined to namespaces
//! of its test's own.

use crate::common;
use crate::sources::{
    Broken, a_broken_version_is_rejected_and_the_one_before_serves, app, confined_to, create_namespace, defaults_made,
};

use std::time::Duration;

use kubewasm_host::hotload::directory::Change;
use kubewasm_testenv::ControlPlane;
use rstest::rstest;

use common::{install_source_file, plugin_source};

/// The source of namespace-defaults in JavaScript.
fn namespace_defaults() -> String {
    plugin_source("js/namespace-defaults/namespace-defaults.js")
}

/// Installs `source` as plugin `name` (`<name>.js`) in `dir`, confined to namespace `ns`.
fn install(dir: &std::path::Path, name: &str, source: &str, ns: &str) {
    install_source_file(dir, &format!("{name}.js"), "namespace_defaults_js.wasm", source, &confined_to(ns));
}

#[rstest]
#[case::a_syntax_error("const broken = (;", "syntax error", "SyntaxError")]
// acorn parses it (a module's top level may await); SpiderMonkey does not, in the wrapper.
#[case::a_top_level_await("await Promise.resolve();", "syntax error", "SyntaxError: await is only valid in async")]
#[case::a_missing_module(
    "import { nothing } from 'kubewasm-no-such-module';",
    "import error",
    "Cannot find module 'kubewasm-no-such-module'"
)]
#[case::an_exception_at_import(
    "throw new RangeError('broken at import');",
    "exception at import",
    "RangeError: broken at import"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_javascript_source_is_a_load_error_at_its_line_and_the_version_before_keeps_serving(
    #[case] broken_line: &str,
    #[case] kind: &str,
    #[case] message: &str,
) {
    // One namespace per case: the broken lines' lengths differ.
    let ns = format!("js-broken-{}-{}", broken_line.len(), std::process::id());
    let broken = Broken { line: broken_line, kind, message, at_end: ":" };
    a_broken_version_is_rejected_and_the_one_before_serves("defaults.js", install, &namespace_defaults(), &ns, broken)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_and_python_source_plugins_each_compile_their_own_engine_once() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let pid = std::process::id();
    let namespaces = [format!("js-shared-a-{pid}"), format!("js-shared-b-{pid}"), format!("js-shared-py-{pid}")];
    for ns in &namespaces {
        create_namespace(&client, ns).await;
    }
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "defaults-a", &namespace_defaults(), &namespaces[0]);
    install(dir.path(), "defaults-b", &namespace_defaults(), &namespaces[1]);
    crate::sources::install(dir.path(), "defaults-py", &crate::sources::namespace_defaults(), &namespaces[2]);
    let app = app(&client);
    let changes = app.directory_source(dir.path()).sync().await.unwrap();
    assert_eq!(changes.len(), 3, "three plugins loaded: {changes:?}");
    let runtime = app.plugins().runtime();
    assert_eq!(runtime.engines_compiled(), 2, "not one engine compile per language");
    assert_eq!(runtime.compiled_reused(), 1, "the second JavaScript plugin did not reuse the first one's engine");

    // All three serve, each on its own Namespace.
    for ns in &namespaces {
        defaults_made(&client, ns, None).await;
    }
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

/// namespace-defaults as CommonJS: the SDK by `require('kubewasm-sdk')`, the reconciler in
/// `module.exports`, the rest of the file as it is.
fn namespace_defaults_commonjs() -> String {
    let module = namespace_defaults();
    let (head, rest) = module.split_once("import {").unwrap();
    let (names, rest) = rest.split_once("} from '../../sdk/js/kubewasm.js';").unwrap();
    let body = rest.replace("export const { describe, reconcile, map } = reconciler(", "module.exports = reconciler(");
    assert_ne!(body, rest, "namespace-defaults no longer exports what reconciler returns");
    format!("{head}const {{{names}}} = require('kubewasm-sdk');{body}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commonjs_source_serves_as_the_module_does() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = format!("js-commonjs-{}", std::process::id());
    create_namespace(&client, &ns).await;
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "defaults-cjs", &namespace_defaults_commonjs(), &ns);
    let app = app(&client);
    let changes = app.directory_source(dir.path()).sync().await.unwrap();
    assert!(matches!(changes.as_slice(), [(_, Change::Applied(_))]), "the CommonJS source did not load: {changes:?}");
    defaults_made(&client, &ns, None).await;
    assert!(app.shut_down(Duration::from_secs(10)).await);
}
