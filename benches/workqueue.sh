#!/usr/bin/env bash
# WorkQueue throughput beside client-go's workqueue, in one run on one machine:
# add/get/done over 100k distinct keys with 1 and 4 workers (median of 11 rounds each).
# The two programs take turns, PASSES times (default 5), so a change in the machine's speed during
# the run hits both alike; each pass gives a ratio, and the summary is the median ratio.
#   benches/workqueue.sh            # per-pass figures, then the median ratio per key type and workers
#   PASSES=1 benches/workqueue.sh   # one quick pass
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
passes="${PASSES:-5}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "building client-go peer (k8s.io/client-go $(sed -n 's/^require k8s.io\/client-go //p' "$root/benches/go/workqueue/go.mod"))..."
(cd "$root/benches/go/workqueue" && go build -o "$out/go-workqueue" .)
echo "building kubewasm bench (release)..."
rust_bin="$(cd "$root" && cargo bench -p kubewasm --bench workqueue --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "workqueue" and m.get("executable"):
        print(m["executable"])')"

for pass in $(seq 1 "$passes"); do
  echo "pass $pass/$passes"
  "$out/go-workqueue" | sed "s/^/$pass /" | tee -a "$out/results.txt"
  "$rust_bin" | grep '^RESULT' | sed "s/^/$pass /" | tee -a "$out/results.txt"
done

echo
python3 - "$out/results.txt" <<'EOF'
import statistics, sys
go, ours = {}, {}
for line in open(sys.argv[1]):
    run, _, impl, workers, ops = line.split()
    (go if impl.startswith("client-go") else ours).setdefault((impl, workers), {})[run] = float(ops)
go = {workers: runs for (_, workers), runs in go.items()}
for (impl, workers), runs in sorted(ours.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    ratios = sorted(runs[r] / go[workers][r] for r in runs)
    print(f"{impl:<24} workers={workers}  median {statistics.median(runs.values()):>10.0f} ops/s"
          f"  client-go {statistics.median(go[workers].values()):>10.0f} ops/s"
          f"  ratio median {statistics.median(ratios):.2f}x  (passes: {', '.join(f'{r:.2f}' for r in ratios)})")
EOF
