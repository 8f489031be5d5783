"""Reads of the host's informer cache: local, synchronous, never an API call.

Objects come back as dicts with ``apiVersion`` and ``kind`` set."""

import json
from typing import List, Optional

from wit_world.imports import cache as _host

from . import Kind, _call


def _parse(kind: Kind, raw: bytes) -> dict:
    obj = json.loads(raw)
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    return obj


def get(kind: Kind, name: str, namespace: Optional[str] = None) -> Optional[dict]:
    """The cached object ``name`` (in ``namespace``; ``None`` for cluster-scoped kinds), or
    ``None`` if the cache does not hold it."""
    raw = _call(_host.get, kind._gvk(), namespace, name)
    return None if raw is None else _parse(kind, raw)


def list(kind: Kind, namespace: Optional[str] = None, selector: Optional[str] = None) -> List[dict]:
    """Cached objects of ``kind``, optionally in one namespace and matching a label selector."""
    return [_parse(kind, raw) for raw in _call(_host.list, kind._gvk(), namespace, selector)]


def by_index(kind: Kind, index: str, value: str) -> List[dict]:
    """Cached objects of ``kind`` whose index ``index`` has ``value`` (``namespace``, ``label``
    as ``key=value``, ``controller-owner`` as a UID, or a custom index)."""
    return [_parse(kind, raw) for raw in _call(_host.by_index, kind._gvk(), index, value)]
