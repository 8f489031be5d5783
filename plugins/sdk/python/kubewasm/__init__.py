"""Write kubewasm reconcile plugins in Python.

A plugin is one module with one decorated function, which says what should exist::

    from kubewasm import Desired, Kind, Registration, reconciler, cache

    NAMESPACE = Kind("v1", "Namespace")

    @reconciler(Registration(NAMESPACE).owns(Kind("v1", "ConfigMap")))
    def reconcile(request):
        if cache.get(NAMESPACE, request.name) is None:
            return  # gone: nothing to do
        return Desired(children=[{"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "hello", "namespace": request.name}}])

The host applies each child as the plugin (with force, a controller ownerReference to the
Namespace added), sends none that would change nothing, deletes what the plugin made for the key
and no longer returns, then applies ``Desired.status``. A plugin may also write itself
(:mod:`kubewasm.client`) and return ``None``, :class:`Done` or :class:`RequeueAfter`.

Built with ``componentize-py -d wit/controller@0.3.0 -w controller componentize -p
plugins/sdk/python -p <plugin dir> <module>`` (``make plugins`` does it; a ``kubewasm new python``
project installs this package and builds from that copy, see README.md). Objects are plain
dicts of the Kubernetes JSON; cache reads are local, writes go to the API server with field
manager ``kubewasm/<plugin>``. A failing host call raises a :class:`HostError` subclass. What
``reconcile`` raises says how the key is retried: :class:`TerminalError` never (until the object
changes), :class:`RequeueAfterError` after a given delay, anything else with backoff. Every
reconcile runs in a fresh instance: keep no state in module globals.

Helpers: :mod:`kubewasm.finalizers` (cleanup before deletion, with preconditions),
:mod:`kubewasm.conditions` (``meta.SetStatusCondition`` semantics), :func:`is_controlled_by`.
"""

import json
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, List, Optional, Union

import wit_world
from componentize_py_types import Err
from wit_world.imports import config as _config
from wit_world.imports import types as _types

__all__ = [
    "Kind", "Registration", "EventFilter", "Request", "Done", "RequeueAfter", "Desired", "reconciler",
    "settings", "controller_reference", "is_controlled_by", "object_ref", "Preconditions",
    "TerminalError", "RequeueAfterError", "HostError", "NotFound", "Forbidden", "Conflict",
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


def _located(exc: BaseException) -> str:
    """``Type: message at file.py:12 in function``: the exception and where it was raised (its
    innermost frame; if that is in this SDK, also the last frame of plugin code that called it),
    so a reconcile error names the line to look at without a traceback on stderr."""
    text = f"{type(exc).__name__}: {exc}"
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append((code.co_filename.replace("\\", "/"), tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    def where(frame) -> str:
        path, line, name = frame
        parts = path.split("/")
        file = "/".join(parts[-2:]) if len(parts) > 1 and parts[-2] == "kubewasm" else parts[-1]
        return f"{file}:{line} in {name}"
    # The SDK's own entry point (``_guest``) is the outermost frame: it says nothing.
    frames = [f for f in frames if not (f[0].endswith("kubewasm/__init__.py") and f[2] in ("reconcile", "map"))]
    if frames:
        text += f" at {where(frames[-1])}"
        in_sdk = "/kubewasm/" in frames[-1][0]
        callers = [f for f in frames if "/kubewasm/" not in f[0]]
        if in_sdk and callers:
            text += f", called from {where(callers[-1])}"
    return text


def _wit_error(exc: Exception) -> _types.Error:
    """The WIT ``types.error`` for an exception out of ``map``."""
    if isinstance(exc, NotFound):
        return _types.Error_NotFound()
    for wit, cls in _ERRORS.items():
        if type(exc) is cls:
            return wit(str(exc))
    return _types.Error_Other(_located(exc))


class TerminalError(Exception):
    """Raised from ``reconcile``: the object itself is wrong (an invalid spec) and retrying
    cannot help, so the key is not retried until the object changes (controller-runtime's
    ``reconcile.TerminalError``; counted in ``controller_runtime_terminal_reconcile_errors_total``)."""


class RequeueAfterError(Exception):
    """Raised from ``reconcile``: it failed, try again after exactly ``seconds`` (not the key's
    backoff, which does not advance), logging ``reason`` (e.g. ``waiting for Secret db``).
    ``seconds`` is a number of seconds or a :class:`datetime.timedelta`."""

    def __init__(self, seconds: Union[float, timedelta], reason: str):
        super().__init__(reason)
        self.seconds = seconds
        self.reason = reason


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


@dataclass(frozen=True)
class EventFilter:
    """Which events of one use of a kind (the for kind, one owned kind, one watch) trigger; it
    filters that use only, never the cache. Adds and deletes always pass the predicates; with
    predicates set, an update passes if any of them changed (controller-runtime's
    ``GenerationChangedPredicate``, ``LabelChangedPredicate``, ``AnnotationChangedPredicate``)."""

    namespace: Optional[str] = None
    label_selector: Optional[str] = None
    generation_changed: bool = False
    labels_changed: bool = False
    annotations_changed: bool = False

    def _wit(self) -> "wit_world.EventFilter":
        flags = wit_world.Predicates(0)
        if self.generation_changed:
            flags |= wit_world.Predicates.GENERATION_CHANGED
        if self.labels_changed:
            flags |= wit_world.Predicates.LABELS_CHANGED
        if self.annotations_changed:
            flags |= wit_world.Predicates.ANNOTATIONS_CHANGED
        return wit_world.EventFilter(namespace=self.namespace, label_selector=self.label_selector,
                                     predicates=flags)


class Registration:
    """What the plugin reconciles, owns, watches, reads and writes. Chain the setters:
    ``Registration(Kind("v1", "Namespace")).owns(Kind("v1", "ResourceQuota"))``. ``selector``
    (a label selector) or ``filter`` say which changes of the for kind trigger."""

    def __init__(self, for_kind: Kind, selector: Optional[str] = None,
                 filter: Optional[EventFilter] = None):
        for_filter = filter or EventFilter(label_selector=selector)
        self._raw = wit_world.Registration(
            for_kind=for_kind._gvk(), for_filter=for_filter._wit(), owns=[], watches=[], reads=[],
            writes=[], indexes=[], max_concurrent=None)

    def owns(self, kind: Kind, filter: Optional[EventFilter] = None, prune: str = "background") -> "Registration":
        """Creates and controls objects of ``kind`` (a change enqueues the owner's key).
        ``prune`` says what happens to one the plugin made for a key and no longer returns in
        its :class:`Desired` children: ``"background"`` (deleted; Kubernetes' default),
        ``"foreground"`` (deleted once its own dependents are) or ``"never"``."""
        policies = {"background": wit_world.Prune.BACKGROUND, "foreground": wit_world.Prune.FOREGROUND,
                    "never": wit_world.Prune.NEVER}
        if prune not in policies:
            raise ValueError(f"prune must be one of {', '.join(policies)}, not {prune!r}")
        self._raw.owns.append(wit_world.Owned(kind=kind._gvk(), filter=(filter or EventFilter())._wit(),
                                              prune=policies[prune]))
        return self

    def watches(self, kind: Kind, selector: Optional[str] = None,
                filter: Optional[EventFilter] = None) -> "Registration":
        """Watches ``kind``; changes map to keys through the ``map`` function."""
        event_filter = filter or EventFilter(label_selector=selector)
        self._raw.watches.append(wit_world.Watch(kind=kind._gvk(), filter=event_filter._wit()))
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
    """Succeeded; reconcile this key again after ``seconds`` (a number of seconds or a
    :class:`datetime.timedelta`; a periodic re-check; the key's backoff is reset). For a failure
    retried after a delay, raise :class:`RequeueAfterError`."""

    seconds: Union[float, timedelta]


@dataclass(frozen=True)
class Desired:
    """What should exist for the key, returned by ``reconcile``: ``children`` (full objects, as
    :func:`kubewasm.client.apply` takes them), the key object's ``status`` (the field's value;
    ``None`` leaves it alone) and ``requeue_after`` (seconds or a :class:`datetime.timedelta`;
    reconcile again once it is so). An empty ``children`` prunes every child the plugin made for
    the key."""

    children: List[dict] = ()
    status: Optional[dict] = None
    requeue_after: Optional[Union[float, timedelta]] = None


def reconciler(registration: Registration, map: Optional[Callable[[Kind, dict], List[tuple]]] = None):
    """Makes the decorated ``reconcile(request)`` the plugin's entry point.

    ``map(kind, obj)``, for plugins that watch other kinds, returns ``(namespace, name)`` keys
    of the for kind to reconcile; an exception out of it retries the change with backoff. The
    decorator defines the ``WitWorld`` class that componentize-py exports in the decorated
    function's module.
    """

    def decorate(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        sys.modules[fn.__module__].WitWorld = _guest(registration, fn, map)
        return fn

    return decorate


def _kind(gvk: _types.Gvk) -> Kind:
    return Kind(f"{gvk.group}/{gvk.version}" if gvk.group else gvk.version, gvk.kind)


def _millis(seconds: Union[float, timedelta]) -> int:
    """Whole milliseconds, the contract's unit, of a delay in seconds or a ``timedelta``."""
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    return max(0, int(round(seconds * 1000)))


def _reconcile_error(exc: Exception) -> "wit_world.ReconcileError":
    """The WIT reconcile error for an exception out of ``reconcile``."""
    if isinstance(exc, TerminalError):
        return wit_world.ReconcileError_Terminal(str(exc))
    if isinstance(exc, RequeueAfterError):
        return wit_world.ReconcileError_RequeueAfter(
            wit_world.Requeue(after_ms=_millis(exc.seconds), reason=exc.reason))
    return wit_world.ReconcileError_Retryable(_located(exc))


def _reconciled(result: Any) -> "wit_world.Reconciled":
    """What ``reconcile`` returned as the contract says it: a desired state, or an action."""
    if isinstance(result, Desired):
        children = [json.dumps(child).encode() for child in result.children]
        status = None if result.status is None else json.dumps(result.status).encode()
        action = (wit_world.Action_Done() if result.requeue_after is None
                  else wit_world.Action_RequeueAfter(_millis(result.requeue_after)))
        return wit_world.Reconciled(desired=wit_world.DesiredState(children=children, status=status), action=action)
    if isinstance(result, RequeueAfter):
        return wit_world.Reconciled(desired=None, action=wit_world.Action_RequeueAfter(_millis(result.seconds)))
    return wit_world.Reconciled(desired=None, action=wit_world.Action_Done())


def _guest(registration: Registration, reconcile: Callable, map_fn: Optional[Callable]) -> type:
    class WitWorld(wit_world.WitWorld):
        def describe(self) -> wit_world.Registration:
            return registration._raw

        def reconcile(self, request: wit_world.Request) -> wit_world.Reconciled:
            req = Request(_kind(request.kind), request.key.namespace, request.key.name, request.attempt)
            try:
                result = reconcile(req)
                return _reconciled(result)
            except Exception as exc:  # the exception's class says how the key is retried
                raise Err(_reconcile_error(exc)) from None

        def map(self, kind: _types.Gvk, obj: bytes) -> List[_types.ObjectKey]:
            if map_fn is None:
                return []
            try:
                keys = map_fn(_kind(kind), json.loads(obj))
            except Exception as exc:  # retried with backoff by the host
                raise Err(_wit_error(exc)) from None
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



@dataclass(frozen=True)
class Preconditions:
    """Conditions an object must meet for a patch or delete to happen, checked by the API server
    with the write; a failure raises :class:`Conflict`. :meth:`of` makes them from an object as
    read, so the write acts on that very object and no newer one."""

    resource_version: Optional[str] = None
    uid: Optional[str] = None

    @staticmethod
    def of(obj: dict, resource_version: bool = True) -> "Preconditions":
        """The uid (and, unless ``resource_version`` is false, the resourceVersion) of ``obj``."""
        meta = obj.get("metadata", {})
        return Preconditions(meta.get("resourceVersion") if resource_version else None, meta.get("uid"))
