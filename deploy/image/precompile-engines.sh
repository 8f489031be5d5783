#!/usr/bin/env bash
# Precompiles every language engine in ENGINE_DIR into ENGINE_DIR/compiled, where a host reads
# them (never writes them) before it would compile an engine: a new pod of the image compiles
# no engine. `make engines-compiled`, `make install` and the Dockerfile's builder stage run it.
#   precompile-engines.sh KUBEWASM_BINARY ENGINE_DIR
# The files are wasmtime's precompiled format, named by the sha256 of the engine as the host
# compiles it (instrumented for snapshots); a host whose wasmtime, settings or CPU the code does
# not fit is refused it by wasmtime's own check, and compiles as before.
# Skipped when ENGINE_DIR/compiled/.inputs matches what decides the files: the engines, the
# locked dependencies and the plugin runtime's source (its engine settings, its instrumenting).
set -euo pipefail
unset KUBEWASM_COMPILER KUBEWASM_COMPILE_CACHE
binary=$(realpath "$1") engines=$(realpath "$2")
cd "$(dirname "$0")/../.."
shopt -s nullglob
built=("$engines"/*.wasm)
[[ ${#built[@]} -gt 0 ]] || { echo "precompile-engines.sh: no engine in $engines (make engines)" >&2; exit 1; }
inputs=$( { sha256sum "${built[@]}" Cargo.lock; find crates/runtime/src -type f -name '*.rs' | sort | xargs sha256sum; } | sha256sum | cut -d' ' -f1)
out=$engines/compiled
if [[ -f $out/.inputs && $(cat "$out/.inputs") == "$inputs" ]]; then
  exit 0
fi
# Removed first, so that each engine is compiled, not found precompiled.
rm -rf "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One small source plugin per engine, as `kubewasm new` writes it, checked through an empty
# compile cache: the check compiles its engine there.
for engine in "${built[@]}"; do
  language=$(basename "$engine"); language=${language%%-*}
  case $language in
    python) file=p.py ;;
    js) file=p.js ;;
    *) echo "precompile-engines.sh: no plugin to precompile $engine with" >&2; exit 1 ;;
  esac
  rm -rf "$work/p"
  (cd "$work" && "$binary" --log warn new "$language" p >/dev/null)
  "$binary" --log warn check "$work/p/$file" --engine-dir "$engines" --compile-cache "$work/cache" >/dev/null
done
install -d "$out"
# Named by the engine's sha256 alone (the image's static binary's hash differs from the tests'
# binary's): wasmtime checks that a file fits the host when it loads it.
for file in "$work/cache/compiled/"*.cwasm; do
  name=${file##*/}
  install -m 0644 "$file" "$out/${name%%-*}.cwasm"
done
echo "$inputs" >"$out/.inputs"
