#!/usr/bin/env bash
# Builds the Helm CLI of one pinned version from its Go module and caches it by version, as
# tests/registry/build.sh does for the registry; a second run with the binary present does
# nothing. The chart tests (host/tests/kit/chart.rs) run it: lint, template, install, upgrade,
# uninstall against the test control plane.
set -euo pipefail

version="${KUBEWASM_HELM_VERSION:-4.3.1}"
cache_root="${KUBEWASM_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubewasm/helm}"
out="$cache_root/$version"

if [ -x "$out/helm" ]; then
  echo "helm: v$version cached in $out"
  exit 0
fi
command -v go >/dev/null || { echo "helm: go is not installed; it is needed to build helm" >&2; exit 1; }

started=$(date +%s)
mkdir -p "$out.partial"
export GOFLAGS="-buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
major="${version%%.*}"
echo "helm: building helm.sh/helm/v$major v$version at nice 10 (cold: a few minutes on 2 cores)"
# The version stamp helm's own Makefile sets; without it `helm version` says v$major.x-dev.
GOBIN="$out.partial" nice -n 10 go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v$major/internal/version.version=v$version -X helm.sh/helm/v$major/internal/version.gitTreeState=clean" \
  "helm.sh/helm/v$major/cmd/helm@v$version"
reported=$("$out.partial/helm" version --template '{{.Version}}')
[ "$reported" = "v$version" ] || { echo "helm: the build reports '$reported', expected 'v$version'" >&2; exit 1; }
rm -rf "$out" && mv "$out.partial" "$out"
echo "helm: v$version built into $out in $(( $(date +%s) - started ))s"
