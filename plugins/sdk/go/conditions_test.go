package kubewasm

import "testing"

func TestSettingANewConditionAppendsItWithATransitionTime(t *testing.T) {
	var conds []Condition
	if !SetStatusCondition(&conds, NewCondition("Ready", true, "Synced", "", 3)) {
		t.Fatal("a new condition is a change")
	}
	c := FindStatusCondition(conds, "Ready")
	if c == nil || c.Status != ConditionTrue || c.ObservedGeneration != 3 || c.LastTransitionTime == "" {
		t.Fatalf("got %+v", conds)
	}
}

func TestTheTransitionTimeMovesOnlyWhenTheStatusChanges(t *testing.T) {
	conds := []Condition{{Type: "Ready", Status: ConditionTrue, Reason: "Synced", LastTransitionTime: "2026-01-01T00:00:00Z"}}
	next := NewCondition("Ready", true, "StillSynced", "again", 4)
	next.LastTransitionTime = "2026-02-02T00:00:00Z"
	if !SetStatusCondition(&conds, next) || conds[0].LastTransitionTime != "2026-01-01T00:00:00Z" ||
		conds[0].Reason != "StillSynced" || conds[0].ObservedGeneration != 4 {
		t.Fatalf("same status: got %+v", conds)
	}
	if SetStatusCondition(&conds, next) {
		t.Fatal("setting the same condition again is no change")
	}
	next.Status = ConditionFalse
	if !SetStatusCondition(&conds, next) || conds[0].LastTransitionTime != "2026-02-02T00:00:00Z" {
		t.Fatalf("status change: got %+v", conds)
	}
	if !IsStatusConditionFalse(conds, "Ready") || IsStatusConditionTrue(conds, "Ready") {
		t.Fatalf("got %+v", conds)
	}
}

func TestRemovingAConditionSaysWhetherItWasThere(t *testing.T) {
	conds := []Condition{{Type: "Ready"}, {Type: "Degraded"}}
	if !RemoveStatusCondition(&conds, "Ready") || RemoveStatusCondition(&conds, "Ready") || len(conds) != 1 {
		t.Fatalf("got %+v", conds)
	}
}
