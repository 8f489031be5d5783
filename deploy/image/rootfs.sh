#!/usr/bin/env bash
# The image's files, the one list both builds use: `make image` (deploy/image/build.sh) and the
# Dockerfile's builder stage run this script, so they ship the same files.
#   rootfs.sh OUT KUBEWASM_BINARY PLUGIN_DIR CA_BUNDLE ENGINE_DIR
# PLUGIN_DIR holds the example components as cargo names them (namespace_defaults.wasm, …);
# ENGINE_DIR the language engines `make engines` builds (python-0.3.0.wasm, …), and in its
# compiled/ the same precompiled (`make engines-compiled`).
# OUT/root is the tree owned by root in the image; OUT/kubewasm.debug the binary's line tables. OUT/nonroot holds the directories owned by
# the image's user 65532; the Dockerfile's `COPY --chown=65532:65532` lines name each one, and
# build.sh reads the owners from those lines.
set -euo pipefail
out=$1 binary=$2 plugins=$3 ca=$4 engines=$5
EXAMPLES=(namespace-defaults config-reloader configmap-sync)

rm -rf "$out"
root=$out/root nonroot=$out/nonroot
install -d -m 0755 "$root" "$root/etc" "$root/home" "$root/var" "$root/var/cache"
install -D -m 0755 "$binary" "$root/usr/local/bin/kubewasm"
# Without the release profile's line tables: 43 MB instead of 209 MB (15 MB instead of 49 MB
# compressed); panics and backtraces still name functions (symbols stay). The line tables are
# kept apart in OUT/kubewasm.debug (not in the image; `make release` ships them beside the
# binary), for addr2line or gdb on a backtrace's addresses.
objcopy --only-keep-debug "$binary" "$out/kubewasm.debug"
strip --strip-debug "$root/usr/local/bin/kubewasm"
# The example plugins deploy/overlays/examples runs (KUBEWASM_PLUGINS=/opt/kubewasm/plugins);
# their configs are not baked in: the overlay mounts them beside the components.
for name in "${EXAMPLES[@]}"; do
  install -D -m 0644 "$plugins/${name//-/_}.wasm" "$root/opt/kubewasm/plugins/$name.wasm"
done
# The language engines plugins given as source run on, where the binary looks for them
# (/usr/local/lib/kubewasm/engines beside /usr/local/bin).
shopt -s nullglob
built=("$engines"/*.wasm)
[[ ${#built[@]} -gt 0 ]] || { echo "rootfs.sh: no engine in $engines (make engines)" >&2; exit 1; }
for engine in "${built[@]}"; do
  install -D -m 0644 "$engine" "$root/usr/local/lib/kubewasm/engines/${engine##*/}"
done
# The engines precompiled for the image's binary (deploy/image/precompile-engines.sh): a new pod
# maps them and compiles no engine. Read only; the binary never writes beside its engines.
compiled=("$engines"/compiled/*.cwasm)
[[ ${#compiled[@]} -gt 0 ]] || { echo "rootfs.sh: no precompiled engine in $engines/compiled (make engines-compiled)" >&2; exit 1; }
for file in "${compiled[@]}"; do
  install -D -m 0644 "$file" "$root/usr/local/lib/kubewasm/engines/compiled/${file##*/}"
done
# For TLS to endpoints signed by a public CA (the API server's own CA comes from the
# kubeconfig or the service-account mount).
install -D -m 0644 "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
# The users and groups of distroless (gcr.io/distroless/static): root, nonroot 65532, nobody.
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
GROUP
chmod 0644 "$root/etc/passwd" "$root/etc/group"
install -d -m 1777 "$root/tmp"
# Owned by 65532: its home, and the compile cache (KUBEWASM_COMPILE_CACHE) so that `docker run`
# without volumes can keep compiled plugins (in a pod the Deployment mounts an emptyDir there).
install -d -m 0755 "$nonroot/home/nonroot" "$nonroot/var/cache/kubewasm"
