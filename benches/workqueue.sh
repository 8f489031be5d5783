#!/usr/bin/env bash
# WorkQueue throughput beside client-go's workqueue, in one run on one machine:
# add/get/done over 100k distinct keys with 1 and 4 workers (median of 11 rounds each).
#   benches/workqueue.sh        # prints both figures and the ratio per worker count
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p')"
echo "building client-go peer (k8s.io/client-go $(sed -n 's/^require k8s.io\/client-go //p' "$root/benches/go/workqueue/go.mod"))..."
(cd "$root/benches/go/workqueue" && go build -o "$out/go-workqueue" .)
echo "building kubewasm bench (release)..."
(cd "$root" && cargo bench -p kubewasm --bench workqueue --no-run 2>&1 | tail -1)

echo "running client-go..."
"$out/go-workqueue" | tee "$out/go.txt"
echo "running kubewasm..."
(cd "$root" && cargo bench -p kubewasm --bench workqueue 2>/dev/null) | grep '^RESULT' | tee "$out/rust.txt"

echo
awk '
  FNR == NR { go[$3] = $4; next }
  { printf "%-18s workers=%s  %12.0f ops/s   client-go %12.0f ops/s   ratio %.2fx\n", $2, $3, $4, go[$3], $4 / go[$3] }
' "$out/go.txt" "$out/rust.txt"
