"""sample-controller: kubernetes/sample-controller's Foo controller in desired-state mode, the
Python twin of plugins/rust/sample-controller (same CRD, deploy/crds/examples/foo.yaml, and the
same behaviour): a Foo's Deployment with its replicas, its available replicas in the Foo's
status, ``ErrResourceExists`` for a Deployment the Foo does not control, ``Synced`` Events."""

from kubewasm import Desired, Kind, Registration, TerminalError, cache, events, is_controlled_by, reconciler

FOO = Kind("samplecontroller.k8s.io/v1alpha1", "Foo")
DEPLOYMENT = Kind("apps/v1", "Deployment")


def deployment(foo: dict, name: str, namespace: str) -> dict:
    """The Deployment ``foo`` wants (the host adds the Foo as its owner)."""
    labels = {"app": "nginx", "controller": foo["metadata"]["name"]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": foo.get("spec", {}).get("replicas", 1), "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}}}}


@reconciler(Registration(FOO).owns(DEPLOYMENT))
def reconcile(request):
    foo = cache.get(FOO, request.name, request.namespace)
    if foo is None:
        return
    name = foo.get("spec", {}).get("deploymentName")
    if not name:
        raise TerminalError(f"{request.namespace}/{request.name}: deployment name must be specified")
    existing = cache.get(DEPLOYMENT, name, request.namespace)
    if existing is not None and not is_controlled_by(existing, foo):
        message = f'Resource "{name}" already exists and is not managed by Foo'
        events.warning(foo, "ErrResourceExists", message)
        raise RuntimeError(message)
    available = ((existing or {}).get("status") or {}).get("availableReplicas", 0)
    events.normal(foo, "Synced", "Foo synced successfully")
    return Desired(children=[deployment(foo, name, request.namespace)], status={"availableReplicas": available})
