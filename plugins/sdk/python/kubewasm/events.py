"""Kubernetes Events about objects, reported by controller ``kubewasm/<plugin>``."""

from wit_world.imports import events as _host

from . import _call, object_ref


def normal(regarding: dict, reason: str, note: str) -> None:
    """A routine event about ``regarding`` (``reason`` in UpperCamelCase, ``note`` a sentence)."""
    _call(_host.publish, object_ref(regarding), _host.EventType.NORMAL, reason, note)


def warning(regarding: dict, reason: str, note: str) -> None:
    """An event about ``regarding`` that needs a person's attention."""
    _call(_host.publish, object_ref(regarding), _host.EventType.WARNING, reason, note)
