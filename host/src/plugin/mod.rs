//! Sandboxed WebAssembly reconcile plugins: loading, limits, grants and host functions.
