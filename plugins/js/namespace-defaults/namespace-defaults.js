// namespace-defaults: gives every Namespace a default ResourceQuota and a default-deny
// NetworkPolicy, owned by the Namespace, unless the Namespace opts out with a label.
//
// The JavaScript twin of plugins/rust/namespace-defaults (same settings, objects and events).
// Settings (all optional):
//   optOutLabel: kubewasm.dev/no-defaults   # a Namespace with this label (any value) is skipped
//   quotaName: default-quota
//   quota: { pods: "50", requests.cpu: "4", requests.memory: 8Gi }
//   networkPolicyName: default-deny
// When a Namespace opts out, defaults this plugin created there are removed.

import {
  Kind, Registration, cache, client, controllerReference, events, isControlledBy, preconditionsOf, reconciler,
  settings,
} from '../../sdk/js/kubewasm.js';

const NAMESPACE = new Kind('v1', 'Namespace');
const RESOURCE_QUOTA = new Kind('v1', 'ResourceQuota');
const NETWORK_POLICY = new Kind('networking.k8s.io/v1', 'NetworkPolicy');

const DEFAULTS = {
  optOutLabel: 'kubewasm.dev/no-defaults',
  quotaName: 'default-quota',
  quota: { pods: '50', 'requests.cpu': '4', 'requests.memory': '8Gi' },
  networkPolicyName: 'default-deny',
};

// Label stamped on every object this plugin creates.
const MANAGED_BY = ['app.kubernetes.io/managed-by', 'kubewasm-namespace-defaults'];

const meta = (name, ns) => ({
  name,
  namespace: ns.metadata.name,
  labels: { [MANAGED_BY[0]]: MANAGED_BY[1] },
  ownerReferences: [controllerReference(ns)],
});

/** The ResourceQuota for `ns`. */
export const quota = (conf, ns) => ({
  apiVersion: 'v1', kind: 'ResourceQuota', metadata: meta(conf.quotaName, ns),
  spec: { hard: { ...conf.quota } },
});

/** The default-deny NetworkPolicy for `ns`: selects every pod, allows no traffic. */
export const networkPolicy = (conf, ns) => ({
  apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: meta(conf.networkPolicyName, ns),
  spec: { podSelector: {}, policyTypes: ['Ingress', 'Egress'] },
});

/** Deletes `child` (as read from the cache) if `ns` controls it, and only if it is still that
 * object (uid precondition): never a same-named object created since. */
function deleteControlled(kind, child, ns) {
  if (!isControlledBy(child, ns)) return;
  const preconditions = preconditionsOf(child, { resourceVersion: false });
  client.delete(kind, child.metadata.name, child.metadata.namespace, { preconditions });
}

export const { describe, reconcile, map } = reconciler(
  new Registration(NAMESPACE).owns(RESOURCE_QUOTA).owns(NETWORK_POLICY),
  (request) => {
    const conf = settings(DEFAULTS);
    const ns = cache.get(NAMESPACE, request.name);
    if (!ns || ns.metadata.deletionTimestamp) return;
    const name = request.name;
    const optedOut = conf.optOutLabel in (ns.metadata.labels ?? {});
    const existing = cache.get(RESOURCE_QUOTA, conf.quotaName, name);
    if (optedOut) {
      deleteControlled(RESOURCE_QUOTA, existing, ns);
      deleteControlled(NETWORK_POLICY, cache.get(NETWORK_POLICY, conf.networkPolicyName, name), ns);
      return;
    }
    client.apply(quota(conf, ns));
    client.apply(networkPolicy(conf, ns));
    if (!existing) {
      const note = `applied ResourceQuota ${conf.quotaName} and NetworkPolicy ${conf.networkPolicyName}`;
      events.normal(ns, 'DefaultsApplied', note);
    }
  },
);
