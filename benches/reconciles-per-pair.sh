#!/usr/bin/env bash
# Reconciles per (Namespace, plugin) pair with ten copies of namespace-defaults in one host, for
# several host binaries, interleaved (issue 45: each plugin's owned-kind trigger woke it for its
# siblings' children):
#   bash benches/reconciles-per-pair.sh ROUNDS NAMESPACES BINARY...
# Each run gets a fresh local control plane with NAMESPACES Namespaces (plus the 4 system ones),
# starts BINARY over ten copies (each its own child names, as `make bench-converge-ten`), waits
# until every Namespace has every plugin's ResourceQuota, then until the reconcile count has not
# moved for 5 s, and prints the count of successful reconciles over the pairs. A count, not a
# time: it holds on a busy machine, though how many events coalesce in a queue does depend on
# speed. Needs `make plugins control-plane`. Results: BENCHMARKS.md.
set -euo pipefail
rounds=$1 namespaces=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d /tmp/reconciles-per-pair.XXXX)
plugins=10
mkdir -p "$work/plugins"
for i in $(seq 0 $((plugins - 1))); do
  cp "$target/wasm32-wasip2/plugin/namespace_defaults.wasm" "$work/plugins/namespace-defaults-$i.wasm"
  sed -n '/^grants:/,/^limits:/p' "$root/deploy/overlays/examples/plugins/namespace-defaults.yaml" | sed '$d' \
    > "$work/plugins/namespace-defaults-$i.yaml"
  printf 'maxConcurrent: 1\nsettings:\n  quotaName: default-quota-%s\n  networkPolicyName: default-deny-%s\n' "$i" "$i" \
    >> "$work/plugins/namespace-defaults-$i.yaml"
done

# Prints "RECONCILES PAIRS" for one run of binary $1 on a fresh control plane.
measure() {
  local run=$work/run-$RANDOM
  mkdir -p "$run"
  "$target/debug/kubewasm-control-plane" "$run/kubeconfig" </dev/null 2>"$run/control-plane.log" &
  local control_plane=$!
  for _ in $(seq 1 120); do [ -f "$run/kubeconfig" ] && break; sleep 1; done
  local kubectl=(kubectl --kubeconfig "$run/kubeconfig")
  for n in $(seq 1 "$namespaces"); do printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: ns-%05d}\n---\n' "$n"; done \
    | "${kubectl[@]}" apply -f - >/dev/null
  "$1" run --plugins "$work/plugins" --kubeconfig "$run/kubeconfig" --admin-addr 127.0.0.1:18081 \
    --wasm-plugins=false --watch-plugins=false --impersonate-plugins=false --compile-cache "$work/cache-$(basename "$1")" \
    --log warn 2>>"$run/host.log" &
  local host=$!
  local want=$(((namespaces + 4) * plugins))
  until [ "$("${kubectl[@]}" get resourcequota -A --no-headers 2>/dev/null | wc -l)" -ge "$want" ]; do sleep 1; done
  local count last=-1
  while true; do
    count=$(curl -fsS http://127.0.0.1:18081/metrics \
      | awk '/^controller_runtime_reconcile_total\{/ && /result="success"/ {s += $NF} END {print s + 0}')
    [ "$count" = "$last" ] && break
    last=$count
    sleep 5
  done
  kill "$host" "$control_plane"
  wait "$host" "$control_plane" 2>/dev/null || true
  echo "$count $((namespaces + 4)) $plugins"
}

printf '%-40s %5s %11s %6s %15s\n' binary round reconciles pairs "per pair"
for round in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    read -r count ns n < <(measure "$bin")
    printf '%-40s %5s %11s %6s %15s\n' "$(basename "$bin")" "$round" "$count" "$((ns * n))" \
      "$(awk -v c="$count" -v p="$((ns * n))" 'BEGIN {printf "%.2f", c / p}')"
  done
done
rm -rf "$work"
