"""Finalizers: run a cleanup before an object goes, and let it go only once the cleanup
succeeded (controller-runtime's ``controllerutil`` finalizer helpers, kube-rs' ``finalizer``).

Every finalizer write is a merge patch of the whole ``metadata.finalizers`` list (a merge patch
replaces lists) carrying the object's resourceVersion and uid as preconditions: a write decided
on a cached copy never drops a finalizer another controller added meanwhile, nor touches a new
object of the same name. A failed precondition raises :class:`kubewasm.Conflict`; let it fail
the reconcile, which is retried once the cache caught up::

    @reconciler(Registration(WIDGET))
    def reconcile(request):
        obj = cache.get(WIDGET, request.name, request.namespace)
        if obj is None:
            return
        return finalizers.finalize(WIDGET, obj, "example.com/cleanup",
                                   apply=lambda o: sync(o), cleanup=lambda o: release(o))
"""

from typing import Any, Callable, List, Optional

from . import Kind, NotFound, Preconditions

__all__ = ["finalizers", "has", "add", "remove", "finalize", "is_deleting"]


def finalizers(obj: dict) -> List[str]:
    """The finalizers of ``obj``."""
    return list(obj.get("metadata", {}).get("finalizers") or [])


def has(obj: dict, finalizer: str) -> bool:
    """Whether ``obj`` carries ``finalizer``."""
    return finalizer in finalizers(obj)


def is_deleting(obj: dict) -> bool:
    """Whether ``obj`` is being deleted (has a ``deletionTimestamp``)."""
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def _write(kind: Kind, obj: dict, names: List[str]) -> dict:
    from . import client  # the host bindings, only when a write happens

    meta = obj.get("metadata", {})
    return client.patch(kind, meta.get("name", ""), {"metadata": {"finalizers": names}},
                        namespace=meta.get("namespace"), preconditions=Preconditions.of(obj))


def add(kind: Kind, obj: dict, finalizer: str) -> dict:
    """Adds ``finalizer`` to ``obj`` (of ``kind``, as read) unless it has it; returns the object
    as stored. :class:`kubewasm.Conflict` if the object changed since it was read."""
    names = finalizers(obj)
    if finalizer in names:
        return obj
    return _write(kind, obj, names + [finalizer])


def remove(kind: Kind, obj: dict, finalizer: str) -> Optional[dict]:
    """Removes ``finalizer`` from ``obj`` (of ``kind``, as read) if it has it; returns the object
    as stored, or ``None`` if that removal let it go. :class:`kubewasm.Conflict` if the object
    changed since it was read."""
    names = finalizers(obj)
    if finalizer not in names:
        return obj
    try:
        return _write(kind, obj, [n for n in names if n != finalizer])
    except NotFound:
        return None


def finalize(kind: Kind, obj: dict, finalizer: str, apply: Callable[[dict], Any],
             cleanup: Callable[[dict], Any]) -> Any:
    """Runs ``apply(obj)`` with ``finalizer`` in place, or ``cleanup(obj)`` when the object is
    being deleted. A live object without the finalizer gets it first (``apply`` sees the stored
    object); an object being deleted that carries it gets ``cleanup``, and the finalizer is
    removed once ``cleanup`` returned (an exception keeps it, so the cleanup is retried); one
    being deleted without it is left alone. Returns what ``apply`` or ``cleanup`` returned."""
    if not is_deleting(obj):
        return apply(add(kind, obj, finalizer))
    if not has(obj, finalizer):
        return None
    result = cleanup(obj)
    remove(kind, obj, finalizer)
    return result
