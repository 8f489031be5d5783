"""kubewasm.finalizers against a fake host client: preconditions and the cleanup order."""

import copy

import pytest

from kubewasm import Conflict, Kind
from kubewasm import finalizers

WIDGET = Kind("example.com/v1", "Widget")
NAME = "example.com/cleanup"


def widget(**meta):
    return {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns", "uid": "u1", "resourceVersion": "5", **meta}}


def test_a_live_object_gets_the_finalizer_with_preconditions_before_apply(fake_client):
    fake_client.objects["w"] = widget()
    seen = []
    finalizers.finalize(WIDGET, widget(), NAME, apply=seen.append, cleanup=pytest.fail)
    name, body, pre = fake_client.patches[0]
    assert body == {"metadata": {"finalizers": [NAME]}}
    assert (pre.uid, pre.resource_version) == ("u1", "5")
    assert finalizers.has(seen[0], NAME)


def test_cleanup_runs_then_the_finalizer_goes_keeping_the_others(fake_client):
    deleting = widget(finalizers=["other", NAME], deletionTimestamp="2026-01-01T00:00:00Z")
    fake_client.objects["w"] = copy.deepcopy(deleting)
    cleaned = []
    finalizers.finalize(WIDGET, deleting, NAME, apply=pytest.fail, cleanup=cleaned.append)
    assert cleaned == [deleting]
    assert fake_client.patches[0][1] == {"metadata": {"finalizers": ["other"]}}


def test_a_failed_cleanup_keeps_the_finalizer(fake_client):
    deleting = widget(finalizers=[NAME], deletionTimestamp="2026-01-01T00:00:00Z")

    def cleanup(_):
        raise RuntimeError("external system down")

    with pytest.raises(RuntimeError):
        finalizers.finalize(WIDGET, deleting, NAME, apply=pytest.fail, cleanup=cleanup)
    assert fake_client.patches == []


def test_a_stale_copy_is_a_conflict_not_a_clobbered_list(fake_client):
    fake_client.objects["w"] = widget(resourceVersion="6", finalizers=["added-meanwhile"])
    with pytest.raises(Conflict):
        finalizers.add(WIDGET, widget(), NAME)
    assert fake_client.objects["w"]["metadata"]["finalizers"] == ["added-meanwhile"]


def test_an_object_being_deleted_without_the_finalizer_is_left_alone(fake_client):
    gone = widget(deletionTimestamp="2026-01-01T00:00:00Z")
    assert finalizers.finalize(WIDGET, gone, NAME, apply=pytest.fail, cleanup=pytest.fail) is None
    assert fake_client.patches == []


def test_removing_from_an_object_already_gone_returns_none(fake_client):
    assert finalizers.remove(WIDGET, widget(finalizers=[NAME]), NAME) is None
