"""Reads of the host's informer cache: local, synchronous, never an API call.

Objects come back as dicts with ``apiVersion`` and ``kind`` set."""

import json
from dataclasses import dataclass
from typing import Iterator, List, Optional

from wit_world.imports import cache as _host

from . import Kind, _call


def _parse(kind: Kind, raw: bytes) -> dict:
    obj = json.loads(raw)
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    return obj


@dataclass(frozen=True)
class Page:
    """One page of a cached list: its objects, and the token to pass as ``continue_token`` for
    the next page (``None`` on the last)."""

    items: List[dict]
    continue_token: Optional[str]


def get(kind: Kind, name: str, namespace: Optional[str] = None) -> Optional[dict]:
    """The cached object ``name`` (in ``namespace``; ``None`` for cluster-scoped kinds), or
    ``None`` if the cache does not hold it."""
    raw = _call(_host.get, kind._gvk(), namespace, name)
    return None if raw is None else _parse(kind, raw)


def list_page(kind: Kind, namespace: Optional[str] = None, selector: Optional[str] = None,
              field_selector: Optional[str] = None, limit: Optional[int] = None,
              continue_token: Optional[str] = None) -> Page:
    """One page of the cached objects of ``kind`` (namespace/name order): at most ``limit``
    (``None`` for all), after the page ``continue_token`` ended. ``selector`` is a label
    selector; ``field_selector`` matches ``metadata.name`` / ``metadata.namespace``."""
    options = _host.ListOptions(namespace=namespace, label_selector=selector,
                                field_selector=field_selector, limit=limit,
                                continue_token=continue_token)
    page = _call(_host.list, kind._gvk(), options)
    return Page([_parse(kind, raw) for raw in page.items], page.continue_token)


def iterate(kind: Kind, namespace: Optional[str] = None, selector: Optional[str] = None,
            field_selector: Optional[str] = None, page_size: int = 100) -> Iterator[dict]:
    """Every matching cached object of ``kind``, read ``page_size`` at a time, so the plugin
    holds one page at once rather than the whole kind."""
    token = None
    while True:
        page = list_page(kind, namespace, selector, field_selector, page_size, token)
        yield from page.items
        token = page.continue_token
        if token is None:
            return


def list(kind: Kind, namespace: Optional[str] = None, selector: Optional[str] = None,
         field_selector: Optional[str] = None) -> List[dict]:
    """Every cached object of ``kind``, optionally in one namespace and matching a label and a
    field selector, in one page."""
    return list_page(kind, namespace, selector, field_selector).items


def by_index(kind: Kind, index: str, value: str) -> List[dict]:
    """Cached objects of ``kind`` whose index ``index`` has ``value`` (``namespace``, ``label``
    as ``key=value``, ``controller-owner`` as a UID, or a custom index)."""
    return [_parse(kind, raw) for raw in _call(_host.by_index, kind._gvk(), index, value)]


