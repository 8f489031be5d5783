"""namespace-defaults: gives every Namespace a default ResourceQuota and a default-deny
NetworkPolicy, owned by the Namespace, unless the Namespace opts out with a label.

The Python twin of plugins/rust/namespace-defaults (same settings, objects and events).
Settings (all optional)::

    optOutLabel: kubewasm.dev/no-defaults   # a Namespace with this label (any value) is skipped
    quotaName: default-quota
    quota: { pods: "50", requests.cpu: "4", requests.memory: 8Gi }
    networkPolicyName: default-deny

When a Namespace opts out, defaults this plugin created there are removed.
"""

from kubewasm import Kind, Preconditions, Registration, cache, client, controller_reference, events
from kubewasm import is_controlled_by, reconciler, settings

NAMESPACE = Kind("v1", "Namespace")
RESOURCE_QUOTA = Kind("v1", "ResourceQuota")
NETWORK_POLICY = Kind("networking.k8s.io/v1", "NetworkPolicy")

DEFAULTS = {
    "optOutLabel": "kubewasm.dev/no-defaults",
    "quotaName": "default-quota",
    "quota": {"pods": "50", "requests.cpu": "4", "requests.memory": "8Gi"},
    "networkPolicyName": "default-deny",
}

# Label stamped on every object this plugin creates.
MANAGED_BY = ("app.kubernetes.io/managed-by", "kubewasm-namespace-defaults")


def meta(name: str, ns: dict) -> dict:
    return {
        "name": name,
        "namespace": ns["metadata"]["name"],
        "labels": {MANAGED_BY[0]: MANAGED_BY[1]},
        "ownerReferences": [controller_reference(ns)],
    }


def quota(conf: dict, ns: dict) -> dict:
    """The ResourceQuota for ``ns``."""
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta(conf["quotaName"], ns),
            "spec": {"hard": dict(conf["quota"])}}


def network_policy(conf: dict, ns: dict) -> dict:
    """The default-deny NetworkPolicy for ``ns``: selects every pod, allows no traffic."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": meta(conf["networkPolicyName"], ns),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}


def delete_controlled(kind: Kind, child, ns: dict) -> None:
    """Deletes ``child`` (as read from the cache) if ``ns`` controls it, and only if it is still
    that object (uid precondition): never a same-named object created since."""
    if is_controlled_by(child, ns):
        meta = child["metadata"]
        client.delete(kind, meta["name"], meta["namespace"],
                      preconditions=Preconditions.of(child, resource_version=False))


@reconciler(Registration(NAMESPACE).owns(RESOURCE_QUOTA).owns(NETWORK_POLICY))
def reconcile(request):
    conf = settings(DEFAULTS)
    ns = cache.get(NAMESPACE, request.name)
    if ns is None or ns["metadata"].get("deletionTimestamp"):
        return
    name = request.name
    opted_out = conf["optOutLabel"] in (ns["metadata"].get("labels") or {})
    existing = cache.get(RESOURCE_QUOTA, conf["quotaName"], name)
    if opted_out:
        delete_controlled(RESOURCE_QUOTA, existing, ns)
        delete_controlled(NETWORK_POLICY, cache.get(NETWORK_POLICY, conf["networkPolicyName"], name), ns)
        return
    client.apply(quota(conf, ns))
    client.apply(network_policy(conf, ns))
    if existing is None:
        note = f"applied ResourceQuota {conf['quotaName']} and NetworkPolicy {conf['networkPolicyName']}"
        events.normal(ns, "DefaultsApplied", note)
