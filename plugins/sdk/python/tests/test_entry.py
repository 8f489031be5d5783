"""The exported world: exceptions become the WIT reconcile error that says how to retry."""

import json
import sys
from datetime import timedelta

import pytest
import wit_world
from componentize_py_types import Err
from wit_world.imports import types

from kubewasm import (Desired, EventFilter, Kind, NotFound, Registration, RequeueAfter, RequeueAfterError,
                      TerminalError, controller_reference, is_controlled_by, reconciler)

NS = Kind("v1", "Namespace")


def _world(fn):
    """The ``WitWorld`` the decorator defined in ``fn``'s module (this one)."""
    return sys.modules[fn.__module__].WitWorld()


def request():
    return wit_world.Request(kind=NS._gvk(), key=types.ObjectKey(namespace=None, name="a"), attempt=0)


def run(fn):
    reconciler(Registration(NS))(fn)
    return _world(fn).reconcile(request())


def error_of(fn):
    with pytest.raises(Err) as caught:
        run(fn)
    return caught.value.value


def test_a_terminal_error_is_the_terminal_variant():
    def fn(_):
        raise TerminalError("spec.size must be positive")
    assert error_of(fn) == wit_world.ReconcileError_Terminal("spec.size must be positive")


def test_a_requeue_after_error_carries_its_delay_and_reason():
    def fn(_):
        raise RequeueAfterError(2.5, "waiting for Secret db")
    assert error_of(fn) == wit_world.ReconcileError_RequeueAfter(wit_world.Requeue(2500, "waiting for Secret db"))


def test_delays_may_be_timedeltas_with_their_unit_explicit():
    def fn(_):
        raise RequeueAfterError(timedelta(minutes=1), "rate limited")
    assert error_of(fn) == wit_world.ReconcileError_RequeueAfter(wit_world.Requeue(60000, "rate limited"))
    assert run(lambda _: RequeueAfter(timedelta(milliseconds=250))).action == wit_world.Action_RequeueAfter(250)


def test_any_other_exception_is_retryable():
    def fn(_):
        raise KeyError("spec")
    err = error_of(fn)
    assert isinstance(err, wit_world.ReconcileError_Retryable) and "KeyError" in err.value


def test_requeue_after_and_none_are_the_two_actions():
    assert run(lambda _: RequeueAfter(1.5)) == wit_world.Reconciled(None, wit_world.Action_RequeueAfter(1500))
    assert run(lambda _: None) == wit_world.Reconciled(None, wit_world.Action_Done())


def test_a_desired_state_carries_its_children_and_status_as_json():
    child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "a"}}
    reconciled = run(lambda _: Desired(children=[child], status={"ready": True}, requeue_after=2))
    assert [json.loads(c) for c in reconciled.desired.children] == [child]
    assert json.loads(reconciled.desired.status) == {"ready": True}
    assert reconciled.action == wit_world.Action_RequeueAfter(2000)
    nothing = run(lambda _: Desired())
    assert (nothing.desired.children, nothing.desired.status, nothing.action) == ([], None, wit_world.Action_Done())


def test_an_owned_kinds_prune_policy_is_checked_and_defaults_to_background():
    owned = Registration(NS).owns(Kind("v1", "ConfigMap"))._raw.owns[0]
    assert owned.prune == wit_world.Prune.BACKGROUND
    never = Registration(NS).owns(Kind("v1", "ConfigMap"), prune="never")._raw.owns[0]
    assert never.prune == wit_world.Prune.NEVER
    with pytest.raises(ValueError, match="prune must be one of"):
        Registration(NS).owns(Kind("v1", "ConfigMap"), prune="orphan")


def test_map_errors_are_host_errors():
    def reconcile(_):
        return None

    def missing(kind, obj):
        raise NotFound("gone")

    reconciler(Registration(NS).watches(Kind("v1", "ConfigMap")), map=missing)(reconcile)
    with pytest.raises(Err) as caught:
        _world(reconcile).map(Kind("v1", "ConfigMap")._gvk(), json.dumps({}).encode())
    assert caught.value.value == types.Error_NotFound()


def test_event_filters_become_per_use_filters_with_predicate_flags():
    reg = Registration(NS, filter=EventFilter(label_selector="a=b", generation_changed=True)) \
        .owns(Kind("v1", "ConfigMap"), EventFilter(namespace="x", labels_changed=True)) \
        .watches(Kind("v1", "Secret"), "c=d")
    raw = reg._raw
    assert raw.for_filter.label_selector == "a=b"
    assert raw.for_filter.predicates == wit_world.Predicates.GENERATION_CHANGED
    assert (raw.owns[0].filter.namespace, raw.owns[0].filter.predicates) == ("x", wit_world.Predicates.LABELS_CHANGED)
    assert raw.watches[0].filter.label_selector == "c=d" and not raw.watches[0].filter.predicates


def test_is_controlled_by_follows_the_controller_reference():
    owner = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "u1"}}
    child = {"metadata": {"ownerReferences": [controller_reference(owner)]}}
    assert is_controlled_by(child, owner)
    assert not is_controlled_by(child, {"metadata": {"uid": "u2"}}) and not is_controlled_by(None, owner)


def test_a_retryable_error_names_the_file_line_and_function_that_raised_it():
    def welcome(spec):
        return spec["nodePort"]

    def fn(_):
        return welcome({})
    line = welcome.__code__.co_firstlineno + 1
    err = error_of(fn)
    assert err.value == f"KeyError: 'nodePort' at test_entry.py:{line} in welcome", err.value


def test_an_error_raised_in_the_sdk_also_names_the_plugin_line_that_called_it(monkeypatch):
    from kubewasm import settings
    from wit_world.imports import config as host_config

    monkeypatch.setattr(host_config, "settings", lambda: b'{"typo": 1}')

    def fn(_):
        return settings({"greeting": "hello"})
    line = fn.__code__.co_firstlineno + 1
    err = error_of(fn)
    assert "kubewasm/__init__.py:" in err.value and f"called from test_entry.py:{line} in fn" in err.value, err.value
