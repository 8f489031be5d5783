#!/usr/bin/env bash
# `make image`: the Dockerfile's final stage as an OCI image, without a Docker engine or a
# base-image pull. deploy/image/rootfs.sh writes the files (the same script the Dockerfile's
# builder stage runs); each COPY of the final stage becomes part of one layer, made with GNU tar
# with the COPY's owner; USER, WORKDIR, ENV, EXPOSE, LABEL and ENTRYPOINT become the config
# (umoci); skopeo writes the oci-archive.
#   build.sh OUT KUBEWASM_BINARY PLUGIN_DIR ENGINE_DIR
# Writes OUT/oci (an OCI layout, tag VERSION) and OUT/kubewasm-VERSION.oci.tar (an oci-archive
# whose image is named kubewasm:VERSION), then prints the name; OUT/kubewasm and
# OUT/kubewasm.debug are the image's binary and its line tables, for `make release`.
# VERSION: the workspace's version (Cargo.toml); REVISION: git HEAD; SOURCE_DATE_EPOCH: its
# commit time, used for the file times and the config's `created`, so the same files make the
# same image digest.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1 binary=$2 plugins=$3 engines=$4
version=${VERSION:-$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)}
revision=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
name=kubewasm:$version
layout=$out/oci archive=$out/kubewasm-$version.oci.tar

mkdir -p "$out"
deploy/image/rootfs.sh "$out/rootfs" "$binary" "$plugins" /etc/ssl/certs/ca-certificates.crt "$engines"

# The final stage, one instruction a line (no continuations there), ARGs given by this script.
declare -A arg=([VERSION]=$version [REVISION]=$revision)
expand() {
  local s=$1 k
  for k in "${!arg[@]}"; do s=${s//"\${$k}"/${arg[$k]}}; done
  [[ $s != *'$'* ]] || { echo "build.sh: unknown variable in: $1" >&2; exit 1; }
  printf '%s' "$s"
}
json_words() { python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$1"; }
config=() copies=()
while read -r instr rest; do
  case $instr in
    '' | '#'*) ;;
    ARG) [[ -v arg[${rest%%=*}] ]] || { echo "build.sh: no value for ARG $rest" >&2; exit 1; } ;;
    # COPY --from=builder [--chown=UID:GID] SRC DEST, SRC under the builder's /image.
    COPY)
      read -r -a words <<<"$rest"
      owner=0:0
      [[ ${words[0]} == --from=builder ]] || { echo "build.sh: COPY not from builder: $rest" >&2; exit 1; }
      [[ ${words[1]} != --chown=* ]] || { owner=${words[1]#--chown=}; words=("${words[@]:1}"); }
      [[ ${#words[@]} == 3 && ${words[1]} == /image/* ]] || { echo "build.sh: cannot read COPY $rest" >&2; exit 1; }
      copies+=("$owner" "$out/rootfs/${words[1]#/image/}" "${words[2]}") ;;
    USER) config+=(--config.user "$rest") ;;
    WORKDIR) config+=(--config.workingdir "$rest") ;;
    ENV) config+=(--config.env "$(expand "$rest")") ;;
    EXPOSE) config+=(--config.exposedports "$rest/tcp") ;;
    LABEL) config+=(--config.label "$(expand "$rest")") ;;
    ENTRYPOINT) while read -r w; do config+=(--config.entrypoint "$w"); done < <(json_words "$rest") ;;
    CMD) while read -r w; do config+=(--config.cmd "$w"); done < <(json_words "$rest") ;;
    *) echo "build.sh: the Dockerfile's final stage has $instr, which this script does not apply" >&2; exit 1 ;;
  esac
done < <(awk '/^FROM /{n=NR} {line[NR]=$0} END{for (i=n+1; i<=NR; i++) print line[i]}' Dockerfile)

# One layer: each COPY appended in order, its entries renamed to DEST and owned as it says.
layer=$out/layer.tar
rm -f "$layer"
set -- "${copies[@]}"
while (($#)); do
  dest=${3%/}
  tar -rf "$layer" -C "$2" --sort=name --format=posix --numeric-owner --owner="${1%:*}" --group="${1#*:}" \
    --mtime="@$epoch" --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --transform="s,^\\.,.$dest," .
  shift 3
done

rm -rf "$layout"
umoci init --layout "$layout"
umoci new --image "$layout:$version"
umoci raw add-layer --image "$layout:$version" --history.created "$created" \
  --history.created_by "deploy/image/rootfs.sh (COPY)" "$layer"
umoci config --image "$layout:$version" --created "$created" --history.created "$created" \
  --history.created_by "Dockerfile final stage (config)" "${config[@]}"
umoci gc --layout "$layout"
rm -f "$archive"
skopeo copy --quiet "oci:$layout:$version" "oci-archive:$archive:$name"
# Also what `docker save` writes beside the layout, so that every `docker load` names the image:
# a manifest.json (the docker-archive format) and containerd's name annotation in index.json.
extra=$out/archive
rm -rf "$extra" && mkdir "$extra" && tar -xf "$archive" -C "$extra"
python3 - "$extra" "$name" <<'PY'
import json, sys
root, name = sys.argv[1:]
index = json.load(open(f"{root}/index.json"))
[entry] = index["manifests"]
entry["annotations"]["io.containerd.image.name"] = "docker.io/library/" + name
json.dump(index, open(f"{root}/index.json", "w"), separators=(",", ":"))
blob = lambda d: "blobs/" + d["digest"].replace(":", "/")
manifest = json.load(open(f"{root}/{blob(entry)}"))
docker = [{"Config": blob(manifest["config"]), "RepoTags": [name], "Layers": [blob(l) for l in manifest["layers"]]}]
json.dump(docker, open(f"{root}/manifest.json", "w"), separators=(",", ":"))
PY
tar -cf "$archive" -C "$extra" --sort=name --numeric-owner --owner=0 --group=0 --mtime="@$epoch" \
  --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime .
# What `make release` archives: the binary as the image ships it, and its line tables apart.
install -m 0755 "$out/rootfs/root/usr/local/bin/kubewasm" "$out/kubewasm"
mv "$out/rootfs/kubewasm.debug" "$out/kubewasm.debug"
rm -rf "$extra" "$out/rootfs" "$layer"
echo "image $name: $layout (OCI layout, tag $version), $archive (oci-archive, $(du -h "$archive" | cut -f1))"
