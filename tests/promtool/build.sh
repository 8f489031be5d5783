#!/usr/bin/env bash
# Builds promtool (Prometheus' rule checker and rule unit-test runner) of one pinned Prometheus
# version from its Go module and caches it by version, as tests/registry/build.sh does for the
# registry; a second run with the binary present does nothing. The alert tests
# (host/tests/kit/alerts.rs) run `promtool check rules` and `promtool test rules` with it.
set -euo pipefail

# Prometheus' Go module is tagged v0.<major*100+minor>.<patch>: v0.316.0 is Prometheus 3.16.0.
version="${KUBEWASM_PROMTOOL_VERSION:-0.316.0}"
cache_root="${KUBEWASM_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubewasm/promtool}"
out="$cache_root/$version"

if [ -x "$out/promtool" ]; then
  echo "promtool: prometheus module v$version cached in $out"
  exit 0
fi
command -v go >/dev/null || { echo "promtool: go is not installed; it is needed to build promtool" >&2; exit 1; }

minor="${version#*.}"; minor="${minor%%.*}"
prometheus_version="$(( minor / 100 )).$(( minor % 100 )).${version##*.}"
started=$(date +%s)
mkdir -p "$out.partial"
export GOFLAGS="-buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
echo "promtool: building github.com/prometheus/prometheus/cmd/promtool v$version at nice 10 (cold: a few minutes)"
# remove_all_sd leaves out the service-discovery plugins (AWS, Azure, GCE, Kubernetes, …: most
# of Prometheus' dependency tree), which rule checks and rule unit tests never use; the build
# tags are Prometheus' own (plugins/*.go).
GOBIN="$out.partial" nice -n 10 go install -trimpath -tags remove_all_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$prometheus_version" \
  "github.com/prometheus/prometheus/cmd/promtool@v$version"
reported=$("$out.partial/promtool" --version | head -n 1)
case "$reported" in
  "promtool, version $prometheus_version "*) echo "$reported" ;;
  *) echo "promtool: the build reports '$reported', expected version $prometheus_version" >&2; exit 1 ;;
esac
rm -rf "$out" && mv "$out.partial" "$out"
echo "promtool: built into $out in $(( $(date +%s) - started ))s"
