package kubewasm

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

type widget struct {
	TypeMeta
	ObjectMeta `json:"metadata"`
}

// patches records finalizer patches and answers with the patched object, or err.
type patches struct {
	bodies []string
	pre    []Preconditions
	err    error
}

func (p *patches) install(t *testing.T) {
	t.Cleanup(func() { finalizerPatch = nil })
	finalizerPatch = func(kind Kind, namespace, name string, body []byte, pre Preconditions) ([]byte, error) {
		p.bodies, p.pre = append(p.bodies, string(body)), append(p.pre, pre)
		if p.err != nil {
			return nil, p.err
		}
		var patch struct {
			Metadata struct{ Finalizers []string } `json:"metadata"`
		}
		_ = json.Unmarshal(body, &patch)
		stored := widget{ObjectMeta: ObjectMeta{Name: name, Namespace: namespace, Finalizers: patch.Metadata.Finalizers}}
		return json.Marshal(stored)
	}
}

func live() *widget {
	return &widget{TypeMeta{"example.com/v1", "Widget"},
		ObjectMeta{Name: "w", Namespace: "ns", UID: "u1", ResourceVersion: "7", Finalizers: []string{"other"}}}
}

func TestFinalizeAddsTheFinalizerWithPreconditionsBeforeApplying(t *testing.T) {
	var p patches
	p.install(t)
	var applied *widget
	_, err := Finalize(live(), "example.com/cleanup",
		func(w *widget) (Result, error) { applied = w; return Result{}, nil },
		func(*widget) (Result, error) { t.Fatal("cleanup of a live object"); return Result{}, nil })
	if err != nil || applied == nil || !slices.Equal(applied.Finalizers, []string{"other", "example.com/cleanup"}) {
		t.Fatalf("applied %+v, %v", applied, err)
	}
	if p.pre[0] != (Preconditions{ResourceVersion: "7", UID: "u1"}) || applied.Kind != "Widget" {
		t.Fatalf("preconditions %+v, kind %q", p.pre, applied.Kind)
	}
}

func TestFinalizeKeepsTheFinalizerWhenCleanupFails(t *testing.T) {
	var p patches
	p.install(t)
	w := live()
	w.DeletionTimestamp, w.Finalizers = "2026-01-01T00:00:00Z", []string{"example.com/cleanup"}
	_, err := Finalize(w, "example.com/cleanup", nil,
		func(*widget) (Result, error) { return Result{}, errors.New("bucket busy") })
	if err == nil || len(p.bodies) != 0 {
		t.Fatalf("err %v, patches %v", err, p.bodies)
	}
	if _, err := Finalize(w, "example.com/cleanup", nil,
		func(*widget) (Result, error) { return Result{}, nil }); err != nil || len(p.bodies) != 1 {
		t.Fatalf("err %v, patches %v", err, p.bodies)
	}
}

func TestRemovingTheLastFinalizerOfAnObjectThatThenGoesIsNotAnError(t *testing.T) {
	p := patches{err: &HostError{Reason: "not-found"}}
	p.install(t)
	w := live()
	w.Finalizers = []string{"example.com/cleanup"}
	stored, err := RemoveFinalizer(w, "example.com/cleanup")
	if stored != nil || err != nil {
		t.Fatalf("got %+v, %v", stored, err)
	}
}

func TestAFailedPreconditionIsAConflict(t *testing.T) {
	p := patches{err: &HostError{Reason: "conflict", Message: "resourceVersion"}}
	p.install(t)
	if _, err := AddFinalizer(live(), "example.com/cleanup"); !IsConflict(err) {
		t.Fatalf("got %v", err)
	}
}

func TestEventFilterPredicatesAreTheWitFlagBits(t *testing.T) {
	f := EventFilter{GenerationChanged: true, AnnotationsChanged: true}
	if got := f.predicateFlags(); got != 0b101 {
		t.Fatalf("got %b", got)
	}
}
