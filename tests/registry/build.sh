#!/usr/bin/env bash
# Builds the CNCF distribution registry (the reference OCI registry) of one pinned version from
# Go modules and caches it by version, as tests/control-plane/build.sh does for Kubernetes; a
# second run with the binary present does nothing. The OCI e2e tests start it with TLS and
# htpasswd auth (tests/support/src/registry.rs).
set -euo pipefail

version="${KUBEWASM_REGISTRY_VERSION:-3.1.2}"
cache_root="${KUBEWASM_REGISTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubewasm/registry}"
out="$cache_root/$version"

if [ -x "$out/registry" ]; then
  echo "registry: distribution v$version cached in $out"
  exit 0
fi
command -v go >/dev/null || { echo "registry: go is not installed; it is needed to build the registry" >&2; exit 1; }

mkdir -p "$out.partial"
export GOFLAGS="-buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
echo "registry: building github.com/distribution/distribution/v3 v$version (cold: a minute or two)"
GOBIN="$out.partial" go install -trimpath -ldflags "-s -w" \
  "github.com/distribution/distribution/v3/cmd/registry@v$version"
"$out.partial/registry" --version
rm -rf "$out" && mv "$out.partial" "$out"
echo "registry: distribution v$version built into $out"
