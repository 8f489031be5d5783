"""Runs the SDK outside a component: the bindings componentize-py generates for the 0.2 world
are plain Python whose host functions raise ``NotImplementedError``, so each test swaps in a
fake host (``fake_client``). ``KUBEWASM_PY_BINDINGS`` names the directory they were generated
into (``make py-sdk-test`` does it)."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.environ["KUBEWASM_PY_BINDINGS"])
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


class FakeClient:
    """Records patches and answers them like an API server holding ``objects`` (by name)
    would: a precondition that does not match the stored object is a conflict."""

    def __init__(self):
        self.objects = {}
        self.patches = []

    def patch(self, kind, namespace, name, patch_kind, body, preconditions):
        from componentize_py_types import Err
        from wit_world.imports import types

        self.patches.append((name, json.loads(body), preconditions))
        stored = self.objects.get(name)
        if stored is None:
            raise Err(types.Error_NotFound())
        meta = stored["metadata"]
        if preconditions.uid not in (None, meta.get("uid")) or \
                preconditions.resource_version not in (None, meta.get("resourceVersion")):
            raise Err(types.Error_Conflict("precondition failed"))
        meta.update(json.loads(body)["metadata"])
        meta["resourceVersion"] = str(int(meta.get("resourceVersion", "0")) + 1)
        return json.dumps(stored).encode()


@pytest.fixture
def fake_client(monkeypatch):
    from wit_world.imports import client as host

    fake = FakeClient()
    monkeypatch.setattr(host, "patch", fake.patch)
    return fake
