// namespace-defaults: every Namespace gets a default ResourceQuota and a default-deny
// NetworkPolicy, owned by it, unless it opts out with a label; then they are removed.
//
// The JavaScript twin of plugins/rust/namespace-defaults in its desired-state mode: the plugin
// says what should exist, the host applies both at once and prunes them when the Namespace opts
// out. Settings (all optional): optOutLabel, quotaName, quota, networkPolicyName, as the Rust one's.

import {
  Kind, Registration, cache, controllerReference, desired, events, reconciler, settings,
} from '../../sdk/js/kubewasm.js';

const [NAMESPACE, QUOTA] = [new Kind('v1', 'Namespace'), new Kind('v1', 'ResourceQuota')];
const DEFAULTS = {
  optOutLabel: 'kubewasm.dev/no-defaults', quotaName: 'default-quota', networkPolicyName: 'default-deny',
  quota: { pods: '50', 'requests.cpu': '4', 'requests.memory': '8Gi' },
};

export const { describe, reconcile, map } = reconciler(
  new Registration(NAMESPACE).owns(QUOTA).owns(new Kind('networking.k8s.io/v1', 'NetworkPolicy')),
  (request) => {
    const [conf, name] = [settings(DEFAULTS), request.name];
    const ns = cache.get(NAMESPACE, name);
    if (!ns || ns.metadata.deletionTimestamp) return;
    if (conf.optOutLabel in (ns.metadata.labels ?? {})) return desired([]); // what it made is pruned
    const meta = (n) => ({ name: n, namespace: name, ownerReferences: [controllerReference(ns)],
      labels: { 'app.kubernetes.io/managed-by': 'kubewasm-namespace-defaults' } });
    if (!cache.get(QUOTA, conf.quotaName, name)) {
      const note = `applied ResourceQuota ${conf.quotaName} and NetworkPolicy ${conf.networkPolicyName}`;
      events.normal(ns, 'DefaultsApplied', note);
    }
    return desired([
      { apiVersion: 'v1', kind: 'ResourceQuota', metadata: meta(conf.quotaName), spec: { hard: { ...conf.quota } } },
      { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: meta(conf.networkPolicyName),
        spec: { podSelector: {}, policyTypes: ['Ingress', 'Egress'] } },
    ]);
  },
);
