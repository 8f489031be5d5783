"""kubewasm.conditions: meta.SetStatusCondition semantics."""

from kubewasm.conditions import (find_status_condition, is_status_condition_true, new_condition,
                                 remove_status_condition, set_status_condition)


def test_the_transition_time_moves_only_when_the_status_changes():
    conds = []
    assert set_status_condition(conds, new_condition("Ready", False, "Waiting", "", 1), at="T1")
    assert set_status_condition(conds, new_condition("Ready", False, "Still", "m", 2), at="T2")
    ready = find_status_condition(conds, "Ready")
    assert (ready["lastTransitionTime"], ready["reason"], ready["observedGeneration"]) == ("T1", "Still", 2)
    assert set_status_condition(conds, new_condition("Ready", True, "Done", "m", 2), at="T3")
    assert find_status_condition(conds, "Ready")["lastTransitionTime"] == "T3"
    assert is_status_condition_true(conds, "Ready")


def test_setting_an_identical_condition_changes_nothing():
    conds = []
    set_status_condition(conds, new_condition("Ready", True, "Done", "ok", 3))
    assert not set_status_condition(conds, new_condition("Ready", True, "Done", "ok", 3), at="later")
    assert len(conds) == 1 and conds[0]["lastTransitionTime"] != "later"


def test_a_new_condition_is_stamped_now_in_rfc3339_seconds():
    conds = []
    set_status_condition(conds, new_condition("Ready", "Unknown", "Starting"))
    stamp = conds[0]["lastTransitionTime"]
    assert len(stamp) == 20 and stamp.endswith("Z") and stamp[10] == "T"
    assert "observedGeneration" not in conds[0]


def test_one_condition_per_type_and_remove_drops_it():
    conds = []
    set_status_condition(conds, new_condition("Ready", True, "Done"))
    set_status_condition(conds, new_condition("Degraded", False, "Fine"))
    assert [c["type"] for c in conds] == ["Ready", "Degraded"]
    assert remove_status_condition(conds, "Ready") and not remove_status_condition(conds, "Ready")
    assert find_status_condition(conds, "Ready") is None and not is_status_condition_true(conds, "Ready")
