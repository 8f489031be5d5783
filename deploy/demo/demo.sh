#!/usr/bin/env bash
# `make demo`: a local control plane, kubewasm with the example plugins, example objects, and
# what the plugins did. Interactive by default (Ctrl-C stops everything); KUBEWASM_DEMO_EXIT=1
# stops after showing the result (CI runs it that way to keep the demo honest).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${KUBEWASM_BIN_DIR:?set by make demo}"
plugins="${KUBEWASM_PLUGIN_DIR:?set by make demo}"
work=.kubewasm/demo
admin="${KUBEWASM_DEMO_ADMIN:-127.0.0.1:8080}"
rm -rf "$work" && mkdir -p "$work/plugins"
for plugin in namespace-defaults config-reloader configmap-sync; do
  cp "$plugins/${plugin//-/_}.wasm" "$work/plugins/$plugin.wasm"
done
# The operator configs are the ones deploy/overlays/examples ships in its ConfigMap.
cp deploy/overlays/examples/plugins/*.yaml "$work/plugins/"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

echo "== starting a local control plane (etcd + kube-apiserver)"
"$bin/kubewasm-control-plane" "$work/kubeconfig" </dev/null 2> "$work/control-plane.log" &
pids+=($!)
for _ in $(seq 1 120); do [ -f "$work/kubeconfig" ] && break; sleep 1; done
[ -f "$work/kubeconfig" ] || { echo "control plane did not start:"; tail -20 "$work/control-plane.log"; exit 1; }
export KUBECONFIG="$PWD/$work/kubeconfig"
kubectl=( "${KUBEWASM_KUBECTL:?set by make demo}" --kubeconfig "$KUBECONFIG" )

echo "== installing the CRDs (deploy/crds: WasmPlugin for the host; deploy/crds/examples: ConfigMapSync)"
"${kubectl[@]}" apply -k deploy/crds
"${kubectl[@]}" apply -k deploy/crds/examples
"${kubectl[@]}" wait --for condition=established --timeout=60s crd/configmapsyncs.examples.kubewasm.dev
"${kubectl[@]}" wait --for condition=established --timeout=60s crd/wasmplugins.kubewasm.dev

echo "== starting kubewasm with the plugins in $work/plugins"
# Each plugin runs as its own ServiceAccount (the default), whose RBAC the host makes here with
# the local control plane's admin credentials, as `kubewasm dev` does; a deployment applies
# what `kubewasm rbac` prints instead.
"$bin/kubewasm" run --plugins "$work/plugins" --kubeconfig "$KUBECONFIG" --admin-addr "$admin" \
  --provision-plugin-rbac --log info 2> >(tee "$work/kubewasm.log" >&2) &
pids+=($!)
for _ in $(seq 1 60); do curl -fsS "http://$admin/readyz" >/dev/null 2>&1 && break; sleep 1; done
curl -fsS "http://$admin/readyz" || { echo "kubewasm did not become ready"; exit 1; }

echo "== applying example objects (deploy/demo/objects.yaml)"
"${kubectl[@]}" apply -f deploy/demo/objects.yaml
converged() {
  "${kubectl[@]}" get resourcequota default-quota -n team-b >/dev/null 2>&1 &&
  [ -n "$("${kubectl[@]}" get deploy web -n team-a -o jsonpath='{.spec.template.metadata.annotations.kubewasm\.dev/config-hash}')" ] &&
  "${kubectl[@]}" get configmap web-config -n team-b >/dev/null 2>&1
}
for _ in $(seq 1 90); do converged && break; sleep 1; done
converged || { echo "the plugins did not converge; see $work/kubewasm.log"; exit 1; }

echo; echo "== what the plugins did"
"${kubectl[@]}" get resourcequota,networkpolicy -A -l app.kubernetes.io/managed-by=kubewasm-namespace-defaults
echo; echo "== config-reloader: the pod template's hash of web-config"
"${kubectl[@]}" get deploy web -n team-a -o jsonpath='{.spec.template.metadata.annotations}{"\n"}'
before=$("${kubectl[@]}" get deploy web -n team-a -o jsonpath='{.spec.template.metadata.annotations.kubewasm\.dev/config-hash}')
"${kubectl[@]}" patch configmap web-config -n team-a --type merge -p '{"data":{"mode":"green"}}' >/dev/null
for _ in $(seq 1 60); do
  after=$("${kubectl[@]}" get deploy web -n team-a -o jsonpath='{.spec.template.metadata.annotations.kubewasm\.dev/config-hash}')
  [ "$after" != "$before" ] && break; sleep 1
done
echo "after changing web-config: $before -> $after"
[ "$after" != "$before" ] || { echo "config-reloader did not re-stamp web"; exit 1; }

echo; echo "== configmap-sync: copies of team-a/web-config, and the ConfigMapSync status"
"${kubectl[@]}" get configmaps -A -l examples.kubewasm.dev/sync
"${kubectl[@]}" get configmapsyncs

echo; echo "== events they reported"
"${kubectl[@]}" get events.events.k8s.io -A --field-selector reason=DefaultsApplied \
  -o custom-columns=NAMESPACE:.regarding.name,REASON:.reason,NOTE:.note,BY:.reportingController
echo; echo "== reconciles (http://$admin/metrics)"
curl -fsS "http://$admin/metrics" | grep -E '^controller_runtime_reconcile_total|^workqueue_adds_total' || true
"${kubectl[@]}" get resourcequota default-quota -n team-a >/dev/null
if "${kubectl[@]}" get resourcequota default-quota -n sandbox >/dev/null 2>&1; then
  echo "sandbox opted out but has a quota"; exit 1
fi

echo
echo "Point kubectl at the demo cluster:  export KUBECONFIG=$KUBECONFIG"
echo "(kubectl is at ${KUBEWASM_KUBECTL}). Try: kubectl create namespace team-c --dry-run=client -o yaml |"
echo "  kubectl label -f - --local shared-config=yes -o yaml | kubectl apply -f -   # gets a quota and a web-config copy"
if [ "${KUBEWASM_DEMO_EXIT:-0}" = 1 ]; then
  echo "demo: OK"
  exit 0
fi
echo "Running; Ctrl-C stops kubewasm and the control plane."
wait "${pids[1]}"
