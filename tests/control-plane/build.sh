#!/usr/bin/env bash
# Builds kube-apiserver, etcd, kubectl and kube-controller-manager of one pinned Kubernetes version
# from Go modules and caches them by version; a second run with the binaries present does nothing.
# kube-controller-manager is optional for the harness (envtest has none); tests that need garbage
# collection or namespace deletion start it.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging module with a
# ./staging path. We build it from a throwaway module that requires k8s.io/kubernetes and points
# each staging module at its published v0.X.Y tag, reading the staging list from that version's
# own go.mod rather than hard-coding it.
set -euo pipefail

version="${KUBEWASM_K8S_VERSION:-1.37.2}"
cache_root="${KUBEWASM_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubewasm/k8s}"
out="$cache_root/$version"
bins=(kube-apiserver etcd kubectl kube-controller-manager)

have_all() { for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done; [ -f "$out/.complete" ]; }
if have_all; then
  echo "control-plane: Kubernetes v$version binaries cached in $out"
  exit 0
fi
command -v go >/dev/null || { echo "control-plane: go is not installed; it is needed to build Kubernetes" >&2; exit 1; }

started=$(date +%s)
log() { echo "control-plane [$(( $(date +%s) - started ))s]: $*"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

log "resolving k8s.io/kubernetes v$version (cold: downloads a few hundred MB of modules)"
gomod=$(go mod download -json "k8s.io/kubernetes@v$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
minor="${version#*.}"; staging_version="v0.$minor"

{
  echo "module kubewasm.dev/k8s-build"
  echo
  grep -E '^go [0-9.]+' "$gomod" | head -n 1
  echo
  echo "require k8s.io/kubernetes v$version"
  echo
  # Each `k8s.io/x => ./staging/src/k8s.io/x` becomes `k8s.io/x => k8s.io/x v0.<minor>`.
  sed -nE 's#^[[:space:]]*(replace[[:space:]]+)?(k8s\.io/[A-Za-z0-9._/-]+)[[:space:]]+=>[[:space:]]+\./staging/.*#replace \2 => \2 '"$staging_version"'#p' "$gomod"
} > go.mod
n=$(grep -c '^replace' go.mod)
[ "$n" -gt 10 ] || { echo "control-plane: found only $n staging modules in $gomod; its layout changed" >&2; exit 1; }
log "$n staging modules mapped to $staging_version"

cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
log "resolving the module graph"
go mod tidy >/dev/null 2>&1 || go mod tidy
etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
log "etcd pinned by this graph: $etcd_version"

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v$version -X $pkg.gitMajor=${version%%.*} -X $pkg.gitMinor=${minor%%.*}"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

mkdir -p "$out.partial"
log "building kube-apiserver, kubectl, kube-controller-manager and etcd (cold: several minutes on 2 cores)"
go build -trimpath -ldflags "$ldflags" -o "$out.partial/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-controller-manager
go build -trimpath -ldflags "-s -w" -o "$out.partial/etcd" go.etcd.io/etcd/server/v3
# The version stamps are what /version and kubectl report; a wrong -X path would silently leave
# v0.0.0-master. Check them before the build counts as complete.
check() { # name, expected, actual
  [ "$2" = "$3" ] || { echo "control-plane: $1 reports '$3', expected '$2'" >&2; exit 1; }
}
check kube-apiserver "Kubernetes v$version" "$("$out.partial/kube-apiserver" --version)"
check kube-controller-manager "Kubernetes v$version" "$("$out.partial/kube-controller-manager" --version)"
check kubectl "v$version" "$("$out.partial/kubectl" version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')"
check etcd "etcd Version: ${etcd_version#v}" "$("$out.partial/etcd" --version | head -n 1)"
log "verified: kube-apiserver, kube-controller-manager and kubectl report v$version, etcd ${etcd_version#v}"
printf 'kubernetes=v%s\netcd=%s\n' "$version" "$etcd_version" > "$out.partial/VERSIONS"
touch "$out.partial/.complete"
rm -rf "$out"; mv "$out.partial" "$out"
log "done: $(ls "$out" | tr '\n' ' ')in $out"
