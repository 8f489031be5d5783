#!/usr/bin/env bash
# The host's resident memory just after start-up, compiling the plugin (cold: empty compile
# cache) or reading it from the cache (warm), for several host binaries, interleaved:
#   bash benches/start-rss.sh ROUNDS BINARY...
# Each run serves namespace-defaults from a plugin directory against one local control plane,
# waits for /readyz, lets the first reconciles finish (5 s), and prints VmRSS and VmHWM.
# Needs `make plugins control-plane`. Results: benches/HISTORY.md, "Converge beside controller-runtime" (start-up RSS).
set -euo pipefail
rounds=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d /tmp/start-rss.XXXX)
mkdir -p "$work/plugins"
cp "$target/wasm32-wasip2/plugin/namespace_defaults.wasm" "$work/plugins/namespace-defaults.wasm"
cp "$root/deploy/overlays/examples/plugins/namespace-defaults.yaml" "$work/plugins/"
"$target/debug/kubewasm-control-plane" "$work/kubeconfig" </dev/null 2>"$work/control-plane.log" &
control_plane=$!
trap 'kill $control_plane; wait $control_plane 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do [ -f "$work/kubeconfig" ] && break; sleep 1; done

# Prints "RSS HWM" in MiB for one start of $1 with compile cache $2.
measure() {
  "$1" run --plugins "$work/plugins" --kubeconfig "$work/kubeconfig" --admin-addr 127.0.0.1:18080 \
    --wasm-plugins=false --compile-cache "$2" --log warn 2>>"$work/host.log" &
  local pid=$!
  for _ in $(seq 1 600); do curl -fsS http://127.0.0.1:18080/readyz >/dev/null 2>&1 && break; sleep 0.2; done
  sleep 5
  local rss hwm
  rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  echo "$((rss / 1024)) $((hwm / 1024))"
}

for bin in "$@"; do
  mkdir -p "$work/warm-$(basename "$bin")"
  measure "$bin" "$work/warm-$(basename "$bin")" >/dev/null
done
for round in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    echo "round $round $(basename "$bin") cold: RSS/peak MiB $(measure "$bin" "$(mktemp -d "$work/cold.XXXX")")"
    echo "round $round $(basename "$bin") warm: RSS/peak MiB $(measure "$bin" "$work/warm-$(basename "$bin")")"
  done
done
