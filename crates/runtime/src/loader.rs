//! Loading a plugin: check the bytes, compile (or hit the cache), check the world, call
//! `describe()`, check the registration against the grants. A source plugin's bytes are a
//! [`bundle`](super::source) of its files: its engine is compiled once per host, and each
//! version's source is compiled by the engine, imported and described in one instance.

use std::sync::Arc;

use super::Plugin;
use super::api::{ApiWriter, CacheReader, Caller};
use super::authorizer::Authorizer;
use super::bindings::{Contract, PluginPre, SourcePre};
use super::config::PluginConfig;
use super::dispatch;
use super::engine::Runtime;
use super::grants::{Grants, NotGranted};
use super::outcome::CallFailed;
use super::pool::{self, Oversized, PoolFull};
use super::registration::{InvalidRegistration, Registration};
use super::source::{self, SourceErrorKind, SourceFile};
use super::state::PluginShared;
use super::throttle::{WriteLimiter, WriteRate};

/// The newest world a plugin may implement; the host also serves every older one in
/// `WORLDS`.
pub const WORLD: &str = "kubewasm:controller/controller@0.3.0";

/// Every world the host serves, oldest first.
pub const WORLDS: &[&str] = &["kubewasm:controller/controller@0.1.0", "kubewasm:controller/controller@0.2.0", WORLD];

/// Why a plugin version was rejected. The previous version, if any, keeps serving. A variant's
/// message carries its cause, which is therefore not also its `source()`: shown with `{:#}`, as
/// the host logs and reports errors, the cause would be said twice.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not WebAssembly at all.
    #[error("not a WebAssembly binary: the file does not start with the `\\0asm` magic")]
    NotWasm,
    /// A core module rather than a component.
    #[error(
        "a core WebAssembly module, not a component: build with `--target wasm32-wasip2` (Rust), componentize-py or jco, or wrap it with `wasm-tools component new`"
    )]
    CoreModule,
    /// wasmtime could not compile it.
    #[error("cannot compile the component: {0:#}")]
    Compile(wasmtime::Error),
    /// It does not implement the controller world, or imports what the host does not provide.
    #[error("the component does not fit world `{WORLD}` nor `{old}`: {0:#}", old = WORLDS[0])]
    WrongWorld(wasmtime::Error),
    /// `describe()` failed.
    #[error("describe() failed: {0}")]
    Describe(CallFailed),
    /// `describe()` returned something the host cannot serve.
    #[error(transparent)]
    Registration(#[from] InvalidRegistration),
    /// The registration asks for more than the grants allow.
    #[error(transparent)]
    NotGranted(#[from] Box<NotGranted>),
    /// The settings do not satisfy the config's `settingsSchema`.
    #[error(transparent)]
    InvalidSettings(#[from] super::config::InvalidSettings),
    /// The plugin asked for more memory than the engine's pool allows.
    #[error("limits.memoryBytes = {asked} exceeds the host's maximum of {max} bytes")]
    MemoryAboveMax {
        /// Configured.
        asked: u64,
        /// The engine's maximum.
        max: u64,
    },
    /// Its share of the instance pool does not fit beside the loaded versions' shares.
    #[error(transparent)]
    PoolFull(#[from] PoolFull),
    /// One instance of it does not fit in a pool slot.
    #[error(transparent)]
    Oversized(#[from] Oversized),
    /// A source plugin's source does not load: it does not parse, imports what its engine does
    /// not hold, or raises at its top level.
    #[error("{}{message} ({kind})", at(file, *line, *column))]
    Source {
        /// The file, relative to the plugin's root; empty when the error is not in one.
        file: String,
        /// 1-based; 0 when unknown.
        line: u32,
        /// 1-based; 0 when unknown.
        column: u32,
        /// Syntax, import or exception.
        kind: SourceErrorKind,
        /// The language's message, e.g. `SyntaxError: expected ':'`.
        message: String,
    },
    /// The plugin's config names an engine this host does not carry (or a plugin given as source
    /// names none), or the engine cannot be used.
    #[error(transparent)]
    Engine(#[from] super::engines::Error),
    /// The config names an engine but the bytes are not a source bundle (or not a well-formed
    /// one), or the source has several files and the config no `entry`.
    #[error("not a plugin's source: {0}")]
    InvalidSource(String),
}

/// `file:line:column: ` (as much of it as is known), before a source error's message.
fn at(file: &str, line: u32, column: u32) -> String {
    match (file.is_empty(), line, column) {
        (true, _, _) => String::new(),
        (false, 0, _) => format!("{file}: "),
        (false, line, 0) => format!("{file}:{line}: "),
        (false, line, column) => format!("{file}:{line}:{column}: "),
    }
}

impl From<super::bindings::engine_v0_1::SourceError> for LoadError {
    fn from(e: super::bindings::engine_v0_1::SourceError) -> Self {
        let (file, line, column) = e.location.map_or((String::new(), 0, 0), |l| (l.file, l.line, l.column));
        LoadError::Source { file, line, column, kind: SourceErrorKind::parse(&e.kind), message: e.message }
    }
}

impl LoadError {
    /// Whether the operator's config is what to fix (its grants, limits or settings), rather
    /// than the component: a rejection names the file to edit.
    pub fn blames_config(&self) -> bool {
        matches!(
            self,
            LoadError::NotGranted(_)
                | LoadError::InvalidSettings(_)
                | LoadError::MemoryAboveMax { .. }
                | LoadError::Engine(super::engines::Error::NoEngine { .. })
        )
    }

    /// Bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            LoadError::NotWasm => "not_wasm",
            LoadError::CoreModule => "core_module",
            LoadError::Compile(_) => "compile",
            LoadError::WrongWorld(_) => "wrong_world",
            LoadError::Describe(_) => "describe",
            LoadError::Registration(_) => "registration",
            LoadError::NotGranted(_) => "not_granted",
            LoadError::InvalidSettings(_) => "invalid_settings",
            LoadError::MemoryAboveMax { .. } => "limits",
            LoadError::PoolFull(_) => "pool_full",
            LoadError::Oversized(_) => "limits",
            LoadError::Source { .. } => "source",
            LoadError::Engine(super::engines::Error::NoEngine { .. }) => "no_engine",
            LoadError::Engine(super::engines::Error::Unusable { .. }) => "engine",
            LoadError::InvalidSource(_) => "invalid_source",
        }
    }
}

fn check_header(wasm: &[u8]) -> Result<(), LoadError> {
    if source::is_bundle(wasm) {
        return Ok(());
    }
    match wasm {
        [0, b'a', b's', b'm', 1, 0, 0, 0, ..] => Err(LoadError::CoreModule),
        [0, b'a', b's', b'm', ..] => Ok(()),
        _ => Err(LoadError::NotWasm),
    }
}

impl Runtime {
    /// Loads one plugin version. CPU-heavy steps run off the async workers.
    pub async fn load(
        &self,
        name: &str,
        wasm: Arc<[u8]>,
        config: PluginConfig,
        cache: Arc<dyn CacheReader>,
        writer: Arc<dyn ApiWriter>,
    ) -> Result<Plugin, LoadError> {
        let sha256 = super::sha256_hex(&wasm);
        self.load_digested(name, wasm, sha256, config, cache, writer).await
    }

    /// [`load`](Self::load) for a caller that already hashed `wasm` (`sha256` must be
    /// [`sha256_hex`](super::sha256_hex) of it): a large component is not hashed twice.
    pub async fn load_digested(
        &self,
        name: &str,
        wasm: Arc<[u8]>,
        sha256: String,
        config: PluginConfig,
        cache: Arc<dyn CacheReader>,
        writer: Arc<dyn ApiWriter>,
    ) -> Result<Plugin, LoadError> {
        let result = self.load_inner(name, wasm, sha256, config, cache, writer).await;
        match &result {
            Ok(_) => self.metrics.loaded(name),
            Err(e) => self.metrics.load_error(name, e.metric_label()),
        }
        result
    }

    async fn load_inner(
        &self,
        name: &str,
        wasm: Arc<[u8]>,
        sha256: String,
        config: PluginConfig,
        cache: Arc<dyn CacheReader>,
        writer: Arc<dyn ApiWriter>,
    ) -> Result<Plugin, LoadError> {
        check_header(&wasm)?;
        config.check_settings()?;
        if config.limits.memory_bytes > self.max_memory_bytes {
            return Err(LoadError::MemoryAboveMax { asked: config.limits.memory_bytes, max: self.max_memory_bytes });
        }
        // A source plugin: its engine's pre-instance for now, its own once its source loaded.
        let source = match (&config.engine, source::is_bundle(&wasm)) {
            (Some(_), true) => Some(source_of(&wasm, config.entry.as_deref())?),
            (Some(engine), false) => {
                return Err(LoadError::InvalidSource(format!(
                    "the config names engine {engine}, but this is not source"
                )));
            }
            (None, true) => return Err(self.no_engine_named().into()),
            (None, false) => None,
        };
        let pre = match &config.engine {
            Some(engine) => self.engine(engine).await?,
            None => self.component(&wasm, &sha256).await?,
        };
        let weight = pool::weight(pre.instance_pre().component(), config.limits.memory_bytes)?;

        let rate = WriteRate {
            qps: config.limits.write_qps.unwrap_or(self.write_rate.qps),
            burst: config.limits.write_burst.unwrap_or(self.write_rate.burst),
        };
        let write_limiter = Arc::new(WriteLimiter::new(rate));
        // Events get a bucket of their own at the same rate: a reconcile's writes never wait
        // behind its Events, and an Event past the budget is dropped, not waited for.
        let event_limiter = Arc::new(WriteLimiter::new(rate));
        // Output: limits.outputBytes per call, and per second across calls.
        let output_bytes = u32::try_from(config.limits.output_bytes).unwrap_or(u32::MAX);
        let output_limiter = Arc::new(WriteLimiter::new(WriteRate { qps: output_bytes, burst: output_bytes }));
        // A variant of a plugin (a canary candidate, `<name>/canary`) acts as that plugin: what
        // the serving version made is its own too.
        let caller = Caller::new(name);
        let shared = |grants| {
            Arc::new(PluginShared {
                name: name.into(),
                caller: caller.clone(),
                authorizer: Authorizer::new(&caller.plugin, grants, self.protected.clone(), cache.clone())
                    .allowing_everything(self.authorizer_off),
                limits: config.limits.clone(),
                settings: config.settings_json(),
                cache: cache.clone(),
                writer: writer.clone(),
                write_limiter: write_limiter.clone(),
                event_limiter: event_limiter.clone(),
                output_limiter: output_limiter.clone(),
                metrics: self.metrics.clone(),
                refusals: self.refusals.clone(),
                wall_clock: self.wall_clock,
            })
        };
        // describe() runs with no grants: it may log and read its settings, nothing else.
        let mut plugin = Plugin {
            runtime: self.clone(),
            pre,
            shared: shared(Grants::default()),
            registration: Registration::new(kube::core::GroupVersionKind::gvk("", "", "")),
            sha256,
            max_concurrent: 1,
            revision: 0,
            rate_limiter: config.rate_limiter.clone(),
            idle: Default::default(),
            // One instance for describe(); grown to the plugin's concurrency below.
            share: self.pool.reserve(name, weight, 1)?,
        };
        let registration = match source {
            None => dispatch::describe(&plugin).await.map_err(LoadError::Describe)?,
            Some((files, entry)) => {
                let described = dispatch::describe_source(&plugin, &files, &entry).await;
                let (code, registration) = described.map_err(LoadError::Describe)?.map_err(|e| {
                    tracing::info!(plugin = name, traceback = %e.traceback, "the plugin's source did not load");
                    LoadError::from(e)
                })?;
                let snapshot = dispatch::snapshot(&plugin, &code, &entry).await.map(Arc::new);
                let engine = plugin.pre.clone();
                let (code, entry) = (code.into(), entry.into());
                plugin.pre = Arc::new(PluginPre::Source(SourcePre { engine, code, entry, snapshot }));
                registration
            }
        };
        registration.validate()?;
        let grants = Grants::resolve(&registration, &config.grants)?;
        plugin.max_concurrent = self.clamp_max_concurrent(name, config.max_concurrent.or(registration.max_concurrent));
        // Every worker's reconcile, plus the mapper's one map call at a time.
        let maps = u32::from(!registration.watches.is_empty());
        plugin.share.grow_to(plugin.max_concurrent + maps)?;
        plugin.registration = registration;
        plugin.shared = shared(grants);
        tracing::info!(plugin = name, sha256 = %plugin.sha256, for_kind = %super::grants::KindRef::of(&plugin.registration.for_kind), "plugin loaded");
        Ok(plugin)
    }
}

/// A source bundle's files and the module to import: `entry`, else the one file's path
/// without its extension.
fn source_of(bundle: &[u8], entry: Option<&str>) -> Result<(Vec<SourceFile>, String), LoadError> {
    let files = source::unbundle(bundle).map_err(|e| LoadError::InvalidSource(e.to_string()))?;
    let entry = match (entry, files.as_slice()) {
        (Some(entry), _) => entry.to_owned(),
        (None, [one]) => one.path.rsplit_once('.').map_or(one.path.as_str(), |(stem, _)| stem).replace('/', "."),
        _ => return Err(LoadError::InvalidSource("several files: name the module to import with `entry:`".into())),
    };
    Ok((files, entry))
}

impl Runtime {
    /// The pre-linked component of these bytes: the one a loaded version holds, or compiled
    /// (or read from the compile cache) off the async workers.
    async fn component(&self, wasm: &Arc<[u8]>, sha256: &str) -> Result<Arc<PluginPre>, LoadError> {
        if let Some(pre) = self.compiled(sha256) {
            return Ok(pre);
        }
        let (runtime, wasm) = (self.clone(), wasm.clone());
        let pre = tokio::task::spawn_blocking(move || -> Result<_, LoadError> {
            let component = runtime.compile(&wasm).map_err(LoadError::Compile)?;
            let contract = Contract::of(&component, &runtime.engine);
            let pre = runtime.linker.instantiate_pre(&component).map_err(LoadError::WrongWorld)?;
            PluginPre::new(contract, pre).map_err(LoadError::WrongWorld)
        })
        .await
        .map_err(|e| LoadError::Compile(wasmtime::Error::msg(e.to_string())))??;
        let pre = Arc::new(pre);
        self.remember_compiled(sha256, &pre);
        Ok(pre)
    }

    /// The plugin's concurrency (operator setting, else the plugin's, else 1), clamped to the
    /// host's cap with a warning that names both numbers.
    fn clamp_max_concurrent(&self, name: &str, asked: Option<u32>) -> u32 {
        let asked = asked.unwrap_or(1).max(1);
        let cap = self.max_concurrent_cap;
        if asked > cap {
            tracing::warn!(
                plugin = name,
                asked,
                cap,
                "max-concurrent above the host's cap (--max-concurrent-cap); clamped to the cap"
            );
        }
        asked.min(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_and_core_modules_are_told_apart_by_their_header() {
        assert!(matches!(check_header(b"hello world"), Err(LoadError::NotWasm)));
        assert!(matches!(check_header(b""), Err(LoadError::NotWasm)));
        assert!(matches!(check_header(b"\0asm\x01\0\0\0"), Err(LoadError::CoreModule)));
        assert!(check_header(b"\0asm\x0d\0\x01\0").is_ok());
    }

    #[test]
    fn a_source_of_one_file_imports_that_file_and_one_of_several_needs_an_entry() {
        let file = |path: &str| SourceFile { path: path.into(), contents: Vec::new() };
        let one = source::bundle(&[file("namespace_defaults.py")]);
        assert_eq!(source_of(&one, None).unwrap().1, "namespace_defaults");
        assert_eq!(source_of(&one, Some("other")).unwrap().1, "other");
        let two = source::bundle(&[file("main.py"), file("helpers.py")]);
        assert!(matches!(source_of(&two, None), Err(LoadError::InvalidSource(m)) if m.contains("entry")));
        assert_eq!(source_of(&two, Some("main")).unwrap().1, "main");
    }

    #[test]
    fn a_load_error_says_its_cause_once_however_it_is_shown() {
        let errors = [
            LoadError::Compile(wasmtime::Error::msg("bad section")),
            LoadError::WrongWorld(wasmtime::Error::msg("bad section")),
            LoadError::Describe(CallFailed::Instantiate("bad section".into())),
            LoadError::Engine(super::super::engines::Error::Unusable {
                engine: "python@0.3".into(),
                cause: wasmtime::Error::msg("bad section"),
            }),
        ];
        for error in errors {
            let shown = [error.to_string(), format!("{:#}", anyhow::Error::new(error))];
            for text in shown {
                assert_eq!(text.matches("bad section").count(), 1, "{text}");
            }
        }
    }

    #[test]
    fn a_source_error_says_where_as_compilers_do() {
        let error = |file: &str, line, column| LoadError::Source {
            file: file.into(),
            line,
            column,
            kind: SourceErrorKind::Syntax,
            message: "SyntaxError: expected ':'".into(),
        };
        let said = error("nd.py", 33, 38).to_string();
        assert_eq!(said, "nd.py:33:38: SyntaxError: expected ':' (syntax error)");
        assert_eq!(error("nd.py", 33, 0).to_string(), "nd.py:33: SyntaxError: expected ':' (syntax error)");
        assert_eq!(error("", 0, 0).to_string(), "SyntaxError: expected ':' (syntax error)");
        assert_eq!(error("nd.py", 1, 1).metric_label(), "source");
    }

    #[test]
    fn max_concurrent_is_clamped_to_the_hosts_cap() {
        let runtime = Runtime::new(super::super::RuntimeConfig::default().max_concurrent_cap(16)).unwrap();
        assert_eq!(runtime.clamp_max_concurrent("greedy", Some(u32::MAX)), 16);
        assert_eq!(runtime.clamp_max_concurrent("modest", Some(4)), 4);
        assert_eq!(runtime.clamp_max_concurrent("quiet", None), 1);
    }
}
