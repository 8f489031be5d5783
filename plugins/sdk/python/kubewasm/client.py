"""Writes through the host: server-side apply with field manager ``kubewasm/<plugin>``."""

import json
from typing import Optional

from wit_world.imports import client as _host

from . import Kind, NotFound, _call

PatchType = _host.PatchType


def _bytes(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def apply(obj: dict, force: bool = False) -> dict:
    """Server-side applies ``obj`` (with apiVersion, kind, metadata.name and, for namespaced
    kinds, metadata.namespace); returns the stored object. ``force`` takes ownership of fields
    other managers set."""
    return json.loads(_call(_host.apply, _bytes(obj), force))


def apply_status(obj: dict) -> dict:
    """Server-side applies the status of ``obj``; returns the stored object."""
    return json.loads(_call(_host.apply_status, _bytes(obj)))


def create(obj: dict) -> dict:
    """Creates ``obj``; raises :class:`kubewasm.Conflict` if it exists."""
    return json.loads(_call(_host.create, _bytes(obj)))


def patch(kind: Kind, name: str, body, namespace: Optional[str] = None,
          patch_type: "PatchType" = PatchType.MERGE) -> dict:
    """Patches an object (a JSON merge patch unless ``patch_type`` says otherwise)."""
    return json.loads(_call(_host.patch, kind._gvk(), namespace, name, patch_type, _bytes(body)))


def delete(kind: Kind, name: str, namespace: Optional[str] = None) -> None:
    """Deletes an object; one that is already gone is not an error."""
    try:
        _call(_host.delete, kind._gvk(), namespace, name)
    except NotFound:
        pass
