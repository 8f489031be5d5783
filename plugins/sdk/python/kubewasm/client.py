"""Writes through the host (field manager ``kubewasm/<plugin>``) and uncached reads."""

import json
from typing import Optional

from wit_world.imports import client as _host

from . import Kind, NotFound, Preconditions, _call

PatchType = _host.PatchType
PropagationPolicy = _host.PropagationPolicy


def _bytes(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _preconditions(given: Optional[Preconditions]) -> _host.Preconditions:
    given = given or Preconditions()
    return _host.Preconditions(resource_version=given.resource_version, uid=given.uid)


def apply(obj: dict, force: bool = False) -> dict:
    """Server-side applies ``obj`` (with apiVersion, kind, metadata.name and, for namespaced
    kinds, metadata.namespace); returns the stored object. ``force`` takes ownership of fields
    other managers set."""
    return json.loads(_call(_host.apply, _bytes(obj), force))


def apply_status(obj: dict, force: bool = False) -> dict:
    """Server-side applies the status of ``obj``; returns the stored object. ``force`` takes
    over status fields other managers own (a :class:`kubewasm.Conflict` otherwise)."""
    return json.loads(_call(_host.apply_status, _bytes(obj), force))


def create(obj: dict) -> dict:
    """Creates ``obj``; raises :class:`kubewasm.Conflict` if it exists."""
    return json.loads(_call(_host.create, _bytes(obj)))


def patch(kind: Kind, name: str, body, namespace: Optional[str] = None,
          patch_type: "PatchType" = PatchType.MERGE,
          preconditions: Optional[Preconditions] = None) -> dict:
    """Patches an object (a JSON merge patch unless ``patch_type`` says otherwise), if it meets
    ``preconditions`` (:class:`kubewasm.Conflict` otherwise); returns the stored object."""
    return json.loads(_call(_host.patch, kind._gvk(), namespace, name, patch_type, _bytes(body),
                            _preconditions(preconditions)))


def patch_status(kind: Kind, name: str, body, namespace: Optional[str] = None,
                 patch_type: "PatchType" = PatchType.MERGE,
                 preconditions: Optional[Preconditions] = None) -> dict:
    """Patches the status subresource of an object, as :func:`patch` does the object
    (controller-runtime's ``Status().Patch``)."""
    return json.loads(_call(_host.patch_status, kind._gvk(), namespace, name, patch_type,
                            _bytes(body), _preconditions(preconditions)))


def delete(kind: Kind, name: str, namespace: Optional[str] = None,
           preconditions: Optional[Preconditions] = None,
           propagation_policy: Optional["PropagationPolicy"] = None) -> None:
    """Deletes an object if it meets ``preconditions``; one that is already gone is not an
    error. ``propagation_policy`` (default background) says what happens to its dependents."""
    options = _host.DeleteOptions(preconditions=_preconditions(preconditions),
                                  propagation_policy=propagation_policy)
    try:
        _call(_host.delete, kind._gvk(), namespace, name, options)
    except NotFound:
        pass


def get(kind: Kind, name: str, namespace: Optional[str] = None) -> Optional[dict]:
    """The object read from the API server, past the cache (for reads that must see a write
    the cache may not have caught up with); ``None`` if it does not exist. Costs an API call."""
    raw = _call(_host.get, kind._gvk(), namespace, name)
    if raw is None:
        return None
    obj = json.loads(raw)
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    return obj
