//! The wasmtime engine shared by every plugin: component model, async, pooling allocator, epoch
//! interruption, and the on-disk compile cache (`compile_cache.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Strategy};

mod child;
pub use child::{ChildSettings, compile_child};

use super::bindings::{self, PluginPre};
use super::compile_cache::CompileCache;
use super::compile_process::CompileProcess;
use super::metrics::PluginMetrics;
use super::pool::{Ledger, MEMORIES_PER_INSTANCE, TABLES_PER_INSTANCE};
use super::protected::Protected;
use super::state::PluginCtx;
use super::throttle::WriteRate;

/// How often the epoch advances: the granularity of deadlines, and how often a running plugin
/// yields its tokio worker to other tasks. 10 ms.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Most bytes of each freed memory and table slot reset in place (memset, or a copy of the
/// module's data) rather than handed back to the kernel with madvise. With the pagemap scan only
/// the pages the instance dirtied count, so a typical reconcile (a few dozen pages) leaves no
/// page to fault back in; an idle warm slot holds at most this much RSS. `benches/dispatch.rs`
/// measured 64 KiB, 256 KiB and 1 MiB alike for the Rust getter; 256 KiB leaves room for
/// plugins that touch more. 256 KiB.
pub const DEFAULT_KEEP_RESIDENT: usize = 256 << 10;

/// Largest linear memory any plugin may be configured for (the pool's slot size). 1 GiB.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 1 << 30;

/// Component instances alive at once across all plugins (each reconcile in flight holds one).
/// Each plugin version reserves its share of them at load (`pool.rs`). 1000: about 60 plugins at
/// [`DEFAULT_MAX_CONCURRENT_CAP`] (58 with a map call each) before the pool refuses another.
pub const DEFAULT_POOL_INSTANCES: u32 = 1000;

/// Most concurrent reconciles any plugin gets, whatever its `describe()` or config asks; a
/// larger value is clamped with a warning. Protects the host's tasks and the instance pool from
/// a plugin asking for `u32::MAX`. 16: issue 15's default; controller-runtime's default is 1,
/// and 16 workers keep a plugin whose reconciles wait on the API server busy.
pub const DEFAULT_MAX_CONCURRENT_CAP: u32 = 16;

/// The code generator that turns plugins into machine code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compiler {
    /// Cranelift, wasmtime's optimizing compiler: the fastest plugins, the slowest compile (a
    /// Python or JavaScript component, whose interpreter is in it, takes 10–12 s with a release
    /// host). The default.
    #[default]
    Cranelift,
    /// Winch, wasmtime's baseline compiler: one pass per function, no optimization, several
    /// times faster to compile and slower to run (BENCHMARKS.md "Edit → effect"). `kubewasm
    /// dev`'s default, where a save should be served in seconds.
    Winch,
}

impl Compiler {
    /// The name the `--compiler` flag takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cranelift => "cranelift",
            Self::Winch => "winch",
        }
    }

    /// Every compiler, for `--help`.
    pub const ALL: [Self; 2] = [Self::Cranelift, Self::Winch];

    fn strategy(self) -> Strategy {
        match self {
            Self::Cranelift => Strategy::Cranelift,
            Self::Winch => Strategy::Winch,
        }
    }
}

impl std::str::FromStr for Compiler {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("unknown compiler `{s}` (cranelift or winch)"))
    }
}

impl std::fmt::Display for Compiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors building the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// wasmtime rejected the configuration.
    #[error("cannot configure the wasm engine: {0}")]
    Engine(wasmtime::Error),
    /// The compile cache directory could not be set up.
    #[error("cannot use compile cache {dir}: {cause}")]
    Cache {
        /// The directory.
        dir: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
}

/// The file a language engine (`engines.rs`) was compiled from, as it was then: a rebuilt engine
/// is compiled again.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct EngineFile {
    pub(crate) path: PathBuf,
    pub(crate) len: u64,
    pub(crate) modified: Option<SystemTime>,
}

/// Where a host finds engines when not told: the nearest `engines` directory in its binary's
/// directory or up to two above it (`target/engines`, where `make engines` puts them, for
/// `target/debug/kubewasm` and for the test binaries in `target/debug/deps`), else
/// `lib/kubewasm/engines` beside the binary's directory (`make install` puts them in
/// `~/.cargo/lib/kubewasm/engines` for `~/.cargo/bin/kubewasm`; the image in
/// `/usr/local/lib/kubewasm/engines`); else `engines` beside the binary. `None` when the binary's
/// path is unknown.
pub fn default_engine_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    engine_dir_of(&exe)
}

/// [`default_engine_dir`] for the binary `exe`.
fn engine_dir_of(exe: &Path) -> Option<PathBuf> {
    let dir = exe.parent()?;
    let beside = dir.join("engines");
    let nearest = exe.ancestors().skip(1).take(3).map(|dir| dir.join("engines"));
    let installed = dir.parent().map(|prefix| prefix.join("lib/kubewasm/engines"));
    Some(nearest.chain(installed).find(|dir| dir.is_dir()).unwrap_or(beside))
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    cache_dir: Option<PathBuf>,
    compiler: Compiler,
    compile_process: Option<PathBuf>,
    max_memory_bytes: u64,
    pool_instances: u32,
    memory_budget: Option<u64>,
    keep_resident: usize,
    pagemap_scan: bool,
    metrics: Option<PluginMetrics>,
    max_concurrent_cap: u32,
    write_rate: WriteRate,
    write_timeout: Duration,
    pub(crate) protected: Protected,
    /// Every request allowed by the authorizer ([`authorizer_allows_everything`](Self::authorizer_allows_everything)).
    authorizer_off: bool,
    wall_clock: Option<SystemTime>,
    engine_dir: Option<PathBuf>,
    snapshots: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            compiler: Compiler::default(),
            compile_process: None,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            pool_instances: DEFAULT_POOL_INSTANCES,
            memory_budget: None,
            keep_resident: DEFAULT_KEEP_RESIDENT,
            pagemap_scan: true,
            metrics: None,
            max_concurrent_cap: DEFAULT_MAX_CONCURRENT_CAP,
            write_rate: WriteRate::default(),
            write_timeout: super::limits::DEFAULT_WRITE_TIMEOUT,
            protected: Protected::default(),
            authorizer_off: false,
            wall_clock: None,
            engine_dir: default_engine_dir(),
            snapshots: true,
        }
    }
}

impl RuntimeConfig {
    /// Keep compiled components in `dir` (`compile_cache.rs`: one file per component and engine
    /// configuration, mapped when loaded), so a restart does not recompile. A relative `dir` is
    /// taken from the working directory, so a compile child started elsewhere finds it.
    #[must_use]
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        self.cache_dir = Some(std::path::absolute(&dir).unwrap_or(dir));
        self
    }

    /// Compile components in a child process running `exe` (the host's own binary), which leaves
    /// them in the compile cache for this runtime to load: the compiler's memory and crashes stay
    /// out of this process (see [`compile_process`](super::compile_process)). Only with a
    /// [`cache_dir`](Self::cache_dir); without one, components compile in this process.
    #[must_use]
    pub fn compile_in_child(mut self, exe: impl Into<PathBuf>) -> Self {
        self.compile_process = Some(exe.into());
        self
    }

    /// The code generator (default [`Compiler::Cranelift`]). The compile cache keys entries by
    /// it too, so a cache shared by both never hands one's code to the other.
    #[must_use]
    pub fn compiler(mut self, compiler: Compiler) -> Self {
        self.compiler = compiler;
        self
    }

    /// The flags of `kubewasm compile-plugin` that give a child this configuration's engine.
    pub(crate) fn engine_flags(&self) -> [(&'static str, String); 5] {
        [
            ("--compiler", self.compiler.as_str().to_owned()),
            ("--max-memory-bytes", self.max_memory_bytes.to_string()),
            ("--pool-instances", self.pool_instances.to_string()),
            ("--keep-resident", self.keep_resident.to_string()),
            ("--pagemap-scan", self.pagemap_scan.to_string()),
        ]
    }

    /// The largest linear memory any plugin may be given.
    #[must_use]
    pub fn max_memory_bytes(mut self, bytes: u64) -> Self {
        self.max_memory_bytes = bytes;
        self
    }

    /// How many plugin instances may be alive at once; plugin versions reserve shares of them.
    #[must_use]
    pub fn pool_instances(mut self, n: u32) -> Self {
        self.pool_instances = n;
        self
    }

    /// Bytes of linear memory all loaded plugin versions may reserve together (each its
    /// instances × `limits.memoryBytes`); `None`: unbounded. A version that does not fit is
    /// rejected and the previous one keeps serving.
    #[must_use]
    pub fn memory_budget(mut self, bytes: Option<u64>) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// Bytes of each freed instance slot kept resident (see [`DEFAULT_KEEP_RESIDENT`]).
    #[must_use]
    pub fn keep_resident(mut self, bytes: usize) -> Self {
        self.keep_resident = bytes;
        self
    }

    /// Find the pages a freed slot dirtied with Linux's `PAGEMAP_SCAN` ioctl (6.7+) and reset only
    /// those, up to `keep_resident` bytes, instead of the lowest `keep_resident` bytes. On by
    /// default; wasmtime falls back by itself where the ioctl is missing.
    #[must_use]
    pub fn pagemap_scan(mut self, enable: bool) -> Self {
        self.pagemap_scan = enable;
        self
    }

    /// The most concurrent reconciles a plugin gets (see [`DEFAULT_MAX_CONCURRENT_CAP`]).
    #[must_use]
    pub fn max_concurrent_cap(mut self, cap: u32) -> Self {
        self.max_concurrent_cap = cap.max(1);
        self
    }

    /// The write cap of plugins whose `limits` do not set one (default none, see
    /// [`DEFAULT_WRITE_QPS`](super::throttle::DEFAULT_WRITE_QPS)).
    #[must_use]
    pub fn write_rate(mut self, rate: WriteRate) -> Self {
        self.write_rate = rate;
        self
    }

    /// How long a plugin's write may wait for the API server before it fails as `unavailable`
    /// and trips the API-server breaker (default
    /// [`DEFAULT_WRITE_TIMEOUT`](super::limits::DEFAULT_WRITE_TIMEOUT)).
    #[must_use]
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// The protected objects set by [`protected`](Self::protected); the host adds its own.
    pub fn protected_of(&self) -> &Protected {
        &self.protected
    }

    /// The write timeout set by [`write_timeout`](Self::write_timeout).
    pub fn write_timeout_of(&self) -> Duration {
        self.write_timeout
    }

    /// Host objects no plugin may write (default: WasmPlugins; the host adds its module
    /// namespace and Lease to the same set).
    #[must_use]
    pub fn protected(mut self, protected: Protected) -> Self {
        self.protected = protected;
        self
    }

    /// Test builds only (feature `insecure-test-authorizer`): the authorizer allows every
    /// request and sends it as the plugin wrote it (without the host's mark), so a test can show
    /// what the API server alone refuses — the second layer proven independent of the first. No
    /// flag, config or binary the project ships reaches it.
    #[cfg(feature = "insecure-test-authorizer")]
    #[must_use]
    pub fn authorizer_allows_everything(mut self) -> Self {
        self.authorizer_off = true;
        self
    }

    /// Plugins read `at` from the wall clock, at every call (`kubewasm test --now`): what an
    /// offline run writes (a condition's `lastTransitionTime`, a schedule) does not depend on
    /// when it runs. The monotonic clock, which deadlines use, keeps running.
    #[must_use]
    pub fn fixed_wall_clock(mut self, at: SystemTime) -> Self {
        self.wall_clock = Some(at);
        self
    }

    /// Where the language engines source plugins run on are (`<language>-<version>.wasm`, see
    /// `engines.rs`); default [`default_engine_dir`].
    #[must_use]
    pub fn engine_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.engine_dir = Some(dir.into());
        self
    }

    /// Whether a source plugin's state after import is kept at load and written into each fresh
    /// instance (`snapshot.rs`), or the plugin imported in every instance; default on. Off, for
    /// the benchmarks that measure what it saves.
    #[must_use]
    pub fn source_snapshots(mut self, on: bool) -> Self {
        self.snapshots = on;
        self
    }

    /// Record plugin metrics here.
    #[must_use]
    pub fn metrics(mut self, metrics: PluginMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

/// The engine, the linker with every host import, and the epoch ticker. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) engine: Engine,
    pub(crate) linker: Arc<Linker<PluginCtx>>,
    cache: Option<Arc<CompileCache>>,
    compile_process: Option<CompileProcess>,
    pub(crate) metrics: PluginMetrics,
    pub(crate) max_memory_bytes: u64,
    /// Pre-linked components by sha256, while a loaded version holds them: a new version with
    /// the same bytes (a config change, another plugin from the same file) skips the compile,
    /// which takes 20-30 s for a Python or JavaScript component even with the disk cache off.
    compiled: Arc<parking_lot::Mutex<HashMap<String, Weak<PluginPre>>>>,
    pub(crate) compiled_reused: Arc<AtomicUsize>,
    /// Where the language engines are.
    pub(crate) engine_dir: Option<PathBuf>,
    /// Whether source plugins' state after import is restored ([`RuntimeConfig::source_snapshots`]).
    pub(crate) snapshots: bool,
    /// Compiled language engines, while a loaded source plugin holds them.
    pub(crate) engines: Arc<parking_lot::Mutex<HashMap<EngineFile, Weak<PluginPre>>>>,
    /// Held while an engine compiles: plugins loading at once share one compile.
    pub(crate) engine_compile: Arc<tokio::sync::Mutex<()>>,
    pub(crate) engines_compiled: Arc<AtomicUsize>,
    pub(crate) pool: Ledger,
    pub(crate) max_concurrent_cap: u32,
    pub(crate) write_rate: WriteRate,
    pub(crate) protected: Protected,
    pub(crate) authorizer_off: bool,
    /// What plugins read from the wall clock, when fixed.
    pub(crate) wall_clock: Option<SystemTime>,
    /// What the API server refused plugins that the host allowed.
    pub(crate) refusals: crate::refusals::Refusals,
}

impl Runtime {
    /// Requests the host allowed and the API server refused, per plugin.
    pub fn refusals(&self) -> &crate::refusals::Refusals {
        &self.refusals
    }

    /// The plugin metrics every plugin of this runtime counts into.
    pub fn metrics(&self) -> &PluginMetrics {
        &self.metrics
    }

    /// Builds the engine and starts its epoch ticker (a thread that ends with the engine).
    pub fn new(config: RuntimeConfig) -> Result<Self, Error> {
        let mut pool = PoolingAllocationConfig::default();
        // One slot per component instance, whatever its memories and tables (`pool.rs`).
        let instances = config.pool_instances;
        pool.total_component_instances(instances)
            .total_core_instances(instances.saturating_mul(4))
            .total_memories(instances.saturating_mul(MEMORIES_PER_INSTANCE))
            .max_memories_per_component(MEMORIES_PER_INSTANCE)
            .total_tables(instances.saturating_mul(TABLES_PER_INSTANCE))
            .max_tables_per_component(TABLES_PER_INSTANCE)
            .total_stacks(config.pool_instances)
            .max_memory_size(config.max_memory_bytes as usize)
            // Reset the first pages of a freed slot with memset instead of madvise, so the next
            // instance does not page-fault them back in (most reconciles touch little memory).
            .linear_memory_keep_resident(config.keep_resident)
            .table_keep_resident(config.keep_resident)
            .pagemap_scan(if config.pagemap_scan { Enabled::Auto } else { Enabled::No });
        let mut wasm = Config::new();
        wasm.wasm_component_model(true)
            .strategy(config.compiler.strategy())
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wasm).map_err(Error::Engine)?;
        let cache = match &config.cache_dir {
            Some(dir) => Some(Arc::new(
                CompileCache::new(dir, &engine, super::compile_cache::DEFAULT_SIZE_LIMIT)
                    .map_err(|cause| Error::Cache { dir: dir.clone(), cause })?,
            )),
            None => None,
        };
        let compile_process = match (&config.compile_process, &config.cache_dir) {
            (Some(exe), Some(dir)) => Some(CompileProcess::new(exe.clone(), config.engine_flags(), dir)),
            _ => None,
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(Error::Engine)?;
        bindings::add_to_linker(&mut linker).map_err(Error::Engine)?;
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("kubewasm-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .map_err(|e| Error::Engine(wasmtime::Error::msg(e.to_string())))?;
        let metrics = config.metrics.unwrap_or_default();
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            cache,
            compile_process,
            pool: Ledger::new(config.pool_instances, config.memory_budget, metrics.clone()),
            metrics,
            max_memory_bytes: config.max_memory_bytes,
            compiled: Arc::default(),
            compiled_reused: Arc::default(),
            engine_dir: config.engine_dir,
            snapshots: config.snapshots,
            engines: Arc::default(),
            engine_compile: Arc::default(),
            engines_compiled: Arc::default(),
            max_concurrent_cap: config.max_concurrent_cap,
            write_rate: config.write_rate,
            protected: config.protected,
            authorizer_off: config.authorizer_off,
            wall_clock: config.wall_clock,
            refusals: Default::default(),
        })
    }

    /// The pre-linked component with this sha256, if a loaded version still holds it.
    pub(crate) fn compiled(&self, sha256: &str) -> Option<Arc<PluginPre>> {
        let found = self.compiled.lock().get(sha256).and_then(Weak::upgrade);
        if found.is_some() {
            self.compiled_reused.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Remembers a pre-linked component for as long as a loaded version holds it.
    pub(crate) fn remember_compiled(&self, sha256: &str, pre: &Arc<PluginPre>) {
        let mut compiled = self.compiled.lock();
        compiled.retain(|_, held| held.strong_count() > 0);
        compiled.insert(sha256.to_owned(), Arc::downgrade(pre));
    }

    /// Loads that reused a component (or language engine) compiled in this process instead of
    /// compiling it again.
    pub fn compiled_reused(&self) -> usize {
        self.compiled_reused.load(Ordering::Relaxed)
    }

    /// Instance-pool slots reserved by the loaded plugin versions.
    pub fn pool_reserved(&self) -> u32 {
        self.pool.reserved()
    }

    /// The component of `wasm`: mapped from the compile cache, else compiled into it (in a child
    /// process if the runtime has one) and mapped, else, without a cache, compiled in this
    /// process. CPU-bound: call it off the async workers.
    ///
    /// The cache is keyed by the sha256 of `wasm` hashed here (milliseconds, against seconds of
    /// compile), never by a digest a caller passes along: a digest that did not match its bytes
    /// would hand them another component's code.
    pub(crate) fn compile(&self, wasm: &[u8]) -> wasmtime::Result<Component> {
        let Some(cache) = &self.cache else { return Component::new(&self.engine, wasm) };
        let sha256 = &super::compile_cache::key(wasm);
        if let Some(component) = cache.load(&self.engine, sha256) {
            return Ok(component);
        }
        if let Some(process) = &self.compile_process {
            let started = std::time::Instant::now();
            match process.compile(wasm) {
                Ok(()) => {
                    let seconds = started.elapsed().as_secs_f64();
                    tracing::info!(sha256, seconds, "compiled in a child process");
                    if let Some(component) = cache.load(&self.engine, sha256) {
                        return Ok(component);
                    }
                    tracing::warn!(sha256, "the compile process left nothing loadable: compiling inside the host");
                }
                // Not the module's fault: compile it here rather than reject it.
                Err(error @ super::compile_process::Error::Spawn { .. }) => {
                    tracing::warn!(%error, "cannot start a compile process: compiling inside the host");
                }
                Err(error) => return Err(error.into()),
            }
        }
        self.compile_into(cache, wasm, sha256)
    }

    /// Compiles into the compile cache in this process and maps the result. An invalid component
    /// fails here, compiled once; when the cache cannot be written, the component is compiled
    /// again to stay in memory.
    fn compile_into(&self, cache: &CompileCache, wasm: &[u8], sha256: &str) -> wasmtime::Result<Component> {
        let compiled = self.engine.precompile_component(wasm)?;
        if let Err(error) = cache.store(sha256, &compiled) {
            tracing::warn!(%error, "cannot write the compile cache: compiling in memory");
            return Component::new(&self.engine, wasm);
        }
        match cache.load_compiled(&self.engine, sha256) {
            Some(component) => Ok(component),
            None => Component::new(&self.engine, wasm),
        }
    }

    /// Compiles into the compile cache, whatever it holds: the compile process's side.
    pub(crate) fn compile_to_cache(&self, wasm: &[u8]) -> wasmtime::Result<()> {
        match &self.cache {
            Some(cache) => cache.compile(&self.engine, wasm, &super::compile_cache::key(wasm)),
            None => Err(wasmtime::Error::msg("no compile cache to compile into")),
        }
    }

    /// Compile-cache hits and misses since this runtime started; `None` without a cache.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(|c| {
            let (hits, misses) = c.stats();
            CacheStats { hits, misses }
        })
    }
}

/// Compile-cache counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheStats {
    /// Components loaded from the cache.
    pub hits: usize,
    /// Components compiled (and stored).
    pub misses: usize,
}

#[cfg(test)]
mod tests {
    use std::hash::{DefaultHasher, Hash as _, Hasher as _};

    use super::*;

    #[test]
    fn engines_are_found_in_the_build_tree_then_where_make_install_puts_them_else_beside_the_binary() {
        let root = tempfile::tempdir().unwrap();
        let exe = root.path().join("prefix/bin/kubewasm");
        std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
        assert_eq!(engine_dir_of(&exe), Some(root.path().join("prefix/bin/engines")), "none: beside the binary");
        let installed = root.path().join("prefix/lib/kubewasm/engines");
        std::fs::create_dir_all(&installed).unwrap();
        assert_eq!(engine_dir_of(&exe), Some(installed));
        let built = root.path().join("prefix/engines");
        std::fs::create_dir_all(&built).unwrap();
        assert_eq!(engine_dir_of(&exe), Some(built), "the nearest `engines` first");
    }

    /// The hash wasmtime keys its compile cache and precompiled artefacts by.
    fn compatibility_hash(compiler: Compiler) -> u64 {
        let runtime = Runtime::new(RuntimeConfig::default().pool_instances(2).compiler(compiler)).unwrap();
        let mut hasher = DefaultHasher::new();
        runtime.engine.precompile_compatibility_hash().hash(&mut hasher);
        hasher.finish()
    }

    #[test]
    fn compiler_names_are_what_the_flag_parses() {
        for compiler in Compiler::ALL {
            assert_eq!(compiler.as_str().parse::<Compiler>(), Ok(compiler));
            assert_eq!(compiler.to_string(), compiler.as_str());
        }
        assert!("llvm".parse::<Compiler>().unwrap_err().contains("cranelift or winch"));
    }

    #[test]
    fn a_winch_engine_takes_the_hosts_settings_and_keeps_its_own_compile_cache_entries() {
        // Winch accepts the pooling allocator, epoch interruption and the component model (or
        // `Runtime::new` would fail), and its code is never served to a Cranelift host.
        assert_ne!(compatibility_hash(Compiler::Winch), compatibility_hash(Compiler::Cranelift));
    }

    #[test]
    fn a_compile_child_is_told_the_compiler() {
        let config = RuntimeConfig::default().compiler(Compiler::Winch);
        assert!(config.engine_flags().contains(&("--compiler", "winch".to_owned())));
    }
}
