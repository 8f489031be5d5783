"""Write kubewasm reconcile plugins in Python.

A plugin is one module with one decorated function::

    from kubewasm import Kind, Registration, reconciler, cache, client

    NAMESPACE = Kind("v1", "Namespace")

    @reconciler(Registration(NAMESPACE).owns(Kind("v1", "ConfigMap")))
    def reconcile(request):
        ns = cache.get(NAMESPACE, request.name)
        if ns is None:
            return  # gone: nothing to do
        client.apply({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "hello", "namespace": request.name,
                                   "ownerReferences": [controller_reference(ns)]}})

built with ``componentize-py -d wit/controller@0.1.0 -w controller componentize -p
plugins/sdk/python -p <plugin dir> <module>`` (``make plugins`` does it). Objects are plain
dicts of the Kubernetes JSON; cache reads are local, writes go to the API server with field
manager ``kubewasm/<plugin>``. A failing host call raises a :class:`HostError` subclass; any
exception out of ``reconcile`` becomes the reconcile's error and the key is retried with
backoff. Every reconcile runs in a fresh instance: keep no state in module globals.
"""

import json
import sys
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import wit_world
from componentize_py_types import Err
from wit_world.imports import config as _config
from wit_world.imports import types as _types

__all__ = [
    "Kind", "Registration", "Request", "Done", "RequeueAfter", "reconciler", "settings",
    "controller_reference", "is_controlled_by", "object_ref", "HostError", "NotFound", "Forbidden", "Conflict",
    "Invalid", "Unavailable", "Other",
]


# ---------------------------------------------------------------------------------- kinds


@dataclass(frozen=True)
class Kind:
    """A Kubernetes kind as it appears in JSON: ``Kind("apps/v1", "Deployment")``."""

    api_version: str
    kind: str

    @property
    def group(self) -> str:
        """API group; ``""`` for the core group."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        """API version within the group."""
        return self.api_version.rpartition("/")[2]

    @staticmethod
    def of(obj: dict) -> "Kind":
        """The kind of a JSON object (its ``apiVersion`` and ``kind``)."""
        return Kind(obj["apiVersion"], obj["kind"])

    def _gvk(self) -> _types.Gvk:
        return _types.Gvk(group=self.group, version=self.version, kind=self.kind)


# ---------------------------------------------------------------------------------- errors


class HostError(Exception):
    """A host call failed; the subclass says why (WIT ``types.error``)."""


class NotFound(HostError):
    """The object does not exist."""


class Forbidden(HostError):
    """Outside the plugin's grants, or refused by the API server."""


class Conflict(HostError):
    """Optimistic-concurrency or field-ownership conflict."""


class Invalid(HostError):
    """Rejected as malformed or invalid."""


class Unavailable(HostError):
    """Transient: retrying later may succeed."""


class Other(HostError):
    """Anything else, with the host's message."""


_ERRORS = {
    _types.Error_Forbidden: Forbidden, _types.Error_Conflict: Conflict,
    _types.Error_Invalid: Invalid, _types.Error_Unavailable: Unavailable, _types.Error_Other: Other,
}


def _host_error(err: Err) -> HostError:
    value = err.value
    if isinstance(value, _types.Error_NotFound):
        return NotFound("not found")
    return _ERRORS.get(type(value), Other)(getattr(value, "value", repr(value)))


def _call(fn: Callable, *args):
    """Calls a host import, turning its WIT error into a :class:`HostError`."""
    try:
        return fn(*args)
    except Err as err:
        raise _host_error(err) from None


# ---------------------------------------------------------------------------- registration


class Registration:
    """What the plugin reconciles, owns, watches, reads and writes. Chain the setters:
    ``Registration(Kind("v1", "Namespace")).owns(Kind("v1", "ResourceQuota"))``."""

    def __init__(self, for_kind: Kind, selector: Optional[str] = None):
        self._raw = wit_world.Registration(
            for_kind=for_kind._gvk(), for_label_selector=selector, owns=[], watches=[], reads=[],
            writes=[], indexes=[], max_concurrent=None)

    def owns(self, kind: Kind) -> "Registration":
        """Creates and controls objects of ``kind`` (a change enqueues the owner's key)."""
        self._raw.owns.append(kind._gvk())
        return self

    def watches(self, kind: Kind, selector: Optional[str] = None) -> "Registration":
        """Watches ``kind``; changes map to keys through the ``map`` function."""
        self._raw.watches.append(wit_world.Watch(kind=kind._gvk(), label_selector=selector))
        return self

    def reads(self, kind: Kind) -> "Registration":
        """Also reads ``kind`` from the cache (needs a grant)."""
        self._raw.reads.append(kind._gvk())
        return self

    def writes(self, kind: Kind) -> "Registration":
        """Also writes ``kind`` (needs a grant)."""
        self._raw.writes.append(kind._gvk())
        return self

    def index(self, kind: Kind, name: str, field_path: Optional[str] = None,
              builtin: Optional[str] = None) -> "Registration":
        """Builds index ``name`` over ``kind`` from a dotted field path or a host built-in."""
        source = (wit_world.IndexSource_Field(field_path) if field_path is not None
                  else wit_world.IndexSource_Builtin(builtin or ""))
        self._raw.indexes.append(wit_world.Index(kind=kind._gvk(), name=name, source=source))
        return self

    def max_concurrent(self, n: int) -> "Registration":
        """Asks for ``n`` concurrent reconciles (the operator's setting wins)."""
        self._raw.max_concurrent = n
        return self


# --------------------------------------------------------------------------- entry point


@dataclass(frozen=True)
class Request:
    """One key to reconcile. The object may be gone: read it from the cache."""

    kind: Kind
    namespace: Optional[str]
    name: str
    attempt: int = 0


@dataclass(frozen=True)
class Done:
    """Nothing more to do until something changes (returning ``None`` means the same)."""


@dataclass(frozen=True)
class RequeueAfter:
    """Reconcile this key again after ``seconds``."""

    seconds: float


def reconciler(registration: Registration, map: Optional[Callable[[Kind, dict], List[tuple]]] = None):
    """Makes the decorated ``reconcile(request)`` the plugin's entry point.

    ``map(kind, obj)``, for plugins that watch other kinds, returns ``(namespace, name)`` keys
    of the for kind to reconcile. The decorator defines the ``WitWorld`` class that
    componentize-py exports in the decorated function's module.
    """

    def decorate(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        sys.modules[fn.__module__].WitWorld = _guest(registration, fn, map)
        return fn

    return decorate


def _guest(registration: Registration, reconcile: Callable, map_fn: Optional[Callable]) -> type:
    class WitWorld(wit_world.WitWorld):
        def describe(self) -> wit_world.Registration:
            return registration._raw

        def reconcile(self, request: wit_world.Request) -> wit_world.Action:
            gvk = request.kind
            kind = Kind(f"{gvk.group}/{gvk.version}" if gvk.group else gvk.version, gvk.kind)
            req = Request(kind, request.key.namespace, request.key.name, request.attempt)
            try:
                action = reconcile(req)
            except Exception as exc:  # any failure is this reconcile's error, retried with backoff
                raise Err(f"{type(exc).__name__}: {exc}") from None
            if isinstance(action, RequeueAfter):
                return wit_world.Action_RequeueAfter(max(0, int(action.seconds * 1000)))
            return wit_world.Action_Done()

        def map(self, kind: _types.Gvk, obj: bytes) -> List[_types.ObjectKey]:
            if map_fn is None:
                return []
            api_version = f"{kind.group}/{kind.version}" if kind.group else kind.version
            keys = map_fn(Kind(api_version, kind.kind), json.loads(obj))
            return [_types.ObjectKey(namespace=ns, name=name) for ns, name in keys]

    return WitWorld


# ------------------------------------------------------------------------------- helpers


def settings(defaults: Optional[dict] = None, strict: bool = True) -> dict:
    """The operator's ``settings`` over ``defaults``. With ``strict``, a key that is not in
    ``defaults`` raises ``ValueError`` (a typo never silently falls back to a default)."""
    given = json.loads(_config.settings() or b"{}")
    merged = dict(defaults or {})
    if strict and defaults is not None:
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(unknown)}")
    merged.update(given)
    return merged


def controller_reference(owner: dict) -> dict:
    """An ownerReference making ``owner`` the controller of an object (``controller`` and
    ``blockOwnerDeletion`` set), so the host's Owns trigger and the garbage collector follow it."""
    meta = owner.get("metadata", {})
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta.get("name", ""),
            "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}


def is_controlled_by(obj: Optional[dict], owner: dict) -> bool:
    """Whether ``owner`` (by UID) is the controller of ``obj``."""
    uid = owner.get("metadata", {}).get("uid")
    refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
    return any(r.get("controller") is True and r.get("uid") == uid for r in refs)


def object_ref(obj: dict) -> _types.ObjectRef:
    """A reference to ``obj`` for :mod:`kubewasm.events`."""
    meta = obj.get("metadata", {})
    key = _types.ObjectKey(namespace=meta.get("namespace"), name=meta.get("name", ""))
    return _types.ObjectRef(kind=Kind.of(obj)._gvk(), key=key)

