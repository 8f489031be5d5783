package kubewasm

// Status conditions with apimachinery's meta.SetStatusCondition semantics: one condition per
// type; LastTransitionTime moves only when the status changes; reason, message and
// observedGeneration always follow the new condition. The functions carry the names of
// k8s.io/apimachinery/pkg/api/meta, so code ported from a Go controller reads the same:
//
//	if kubewasm.SetStatusCondition(&w.Status.Conditions,
//		kubewasm.NewCondition("Ready", true, "Synced", "", w.Generation)) {
//		_, err := kubewasm.ApplyStatus(w, false)
//	}

import (
	"slices"
	"time"
)

// Condition is one entry of status.conditions, shaped like metav1.Condition.
type Condition struct {
	Type string `json:"type"`
	// Status is "True", "False" or "Unknown".
	Status             string `json:"status"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	// LastTransitionTime is RFC 3339 (seconds, UTC); SetStatusCondition fills it.
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
}

// The values of Condition.Status.
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// Now is the current time as Kubernetes writes it (RFC 3339, seconds, UTC).
func Now() string { return time.Now().UTC().Format(time.RFC3339) }

// NewCondition is a condition of conditionType, True if ok, else False; generation is the
// object's metadata.generation (its observedGeneration; 0 for none).
func NewCondition(conditionType string, ok bool, reason, message string, generation int64) Condition {
	status := ConditionFalse
	if ok {
		status = ConditionTrue
	}
	return Condition{Type: conditionType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: generation}
}

// SetStatusCondition sets c in conditions like meta.SetStatusCondition: a new type is appended
// with LastTransitionTime (c's own, else now); an existing one takes the new status and, only
// if the status changed, the new LastTransitionTime; reason, message and observedGeneration
// always. Returns whether anything changed, so a status write can be skipped when nothing did.
func SetStatusCondition(conditions *[]Condition, c Condition) bool {
	if c.LastTransitionTime == "" {
		c.LastTransitionTime = Now()
	}
	existing := FindStatusCondition(*conditions, c.Type)
	if existing == nil {
		*conditions = append(*conditions, c)
		return true
	}
	changed := false
	if existing.Status != c.Status {
		existing.Status, existing.LastTransitionTime = c.Status, c.LastTransitionTime
		changed = true
	}
	if existing.Reason != c.Reason || existing.Message != c.Message || existing.ObservedGeneration != c.ObservedGeneration {
		existing.Reason, existing.Message, existing.ObservedGeneration = c.Reason, c.Message, c.ObservedGeneration
		changed = true
	}
	return changed
}

// FindStatusCondition is the condition of conditionType in conditions (to read or change in
// place), or nil.
func FindStatusCondition(conditions []Condition, conditionType string) *Condition {
	for i := range conditions {
		if conditions[i].Type == conditionType {
			return &conditions[i]
		}
	}
	return nil
}

// IsStatusConditionTrue reports whether the condition of conditionType is "True".
func IsStatusConditionTrue(conditions []Condition, conditionType string) bool {
	c := FindStatusCondition(conditions, conditionType)
	return c != nil && c.Status == ConditionTrue
}

// IsStatusConditionFalse reports whether the condition of conditionType is "False".
func IsStatusConditionFalse(conditions []Condition, conditionType string) bool {
	c := FindStatusCondition(conditions, conditionType)
	return c != nil && c.Status == ConditionFalse
}

// RemoveStatusCondition removes the condition of conditionType; returns whether it was there.
func RemoveStatusCondition(conditions *[]Condition, conditionType string) bool {
	before := len(*conditions)
	*conditions = slices.DeleteFunc(*conditions, func(c Condition) bool { return c.Type == conditionType })
	return len(*conditions) != before
}
