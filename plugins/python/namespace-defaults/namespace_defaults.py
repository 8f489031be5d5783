"""namespace-defaults: every Namespace gets a default ResourceQuota and a default-deny
NetworkPolicy, owned by it, unless it opts out with a label; then they are removed.

The Python twin of plugins/rust/namespace-defaults in its desired-state mode: the plugin says
what should exist, the host applies both at once and prunes them when the Namespace opts out.
Settings (all optional): optOutLabel, quotaName, quota, networkPolicyName, as the Rust one's.
"""

from kubewasm import Desired, Kind, Registration, cache, controller_reference, events, reconciler, settings

NAMESPACE, QUOTA = Kind("v1", "Namespace"), Kind("v1", "ResourceQuota")
DEFAULTS = {"optOutLabel": "kubewasm.dev/no-defaults", "quotaName": "default-quota",
            "quota": {"pods": "50", "requests.cpu": "4", "requests.memory": "8Gi"},
            "networkPolicyName": "default-deny"}


@reconciler(Registration(NAMESPACE).owns(QUOTA).owns(Kind("networking.k8s.io/v1", "NetworkPolicy")))
def reconcile(request):
    conf, name = settings(DEFAULTS), request.name
    ns = cache.get(NAMESPACE, name)
    if ns is None or ns["metadata"].get("deletionTimestamp"):
        return
    if conf["optOutLabel"] in (ns["metadata"].get("labels") or {}):
        return Desired([])  # what it made here is pruned
    meta = lambda n: {"name": n, "namespace": name, "ownerReferences": [controller_reference(ns)],
                      "labels": {"app.kubernetes.io/managed-by": "kubewasm-namespace-defaults"}}
    if cache.get(QUOTA, conf["quotaName"], name) is None:
        note = f"applied ResourceQuota {conf['quotaName']} and NetworkPolicy {conf['networkPolicyName']}"
        events.normal(ns, "DefaultsApplied", note)
    return Desired([
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta(conf["quotaName"]),
         "spec": {"hard": dict(conf["quota"])}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(conf["networkPolicyName"]),
         "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
    ])
