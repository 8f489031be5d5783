package kubewasm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestAWrappedTerminalErrorIsNotRetried(t *testing.T) {
	err := fmt.Errorf("reconciling: %w", Terminal(errors.New("spec.size must be positive")))
	got := reconcileErrorOf(err)
	if got.tag != terminalTag || got.message != "reconciling: spec.size must be positive" {
		t.Fatalf("got %+v", got)
	}
}

func TestARequeueAfterErrorCarriesItsDelayInMillisecondsAndItsReason(t *testing.T) {
	got := reconcileErrorOf(RequeueAfter(1500*time.Millisecond, "waiting for Secret db"))
	if got.tag != requeueAfterTag || got.afterMs != 1500 || got.message != "waiting for Secret db" {
		t.Fatalf("got %+v", got)
	}
}

func TestAnyOtherErrorIsRetriedWithBackoff(t *testing.T) {
	if got := reconcileErrorOf(errors.New("boom")); got.tag != retryableTag || got.message != "boom" {
		t.Fatalf("got %+v", got)
	}
}

func TestDurationsRoundToWholeMillisecondsAndNeverGoNegative(t *testing.T) {
	for d, want := range map[time.Duration]uint64{-time.Second: 0, 0: 0, 400 * time.Microsecond: 0,
		600 * time.Microsecond: 1, 2 * time.Minute: 120000} {
		if got := millis(d); got != want {
			t.Errorf("millis(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestAMapErrorKeepsAHostErrorsCaseAndMakesAnythingElseOther(t *testing.T) {
	tag, msg := hostErrorOf(fmt.Errorf("reading: %w", &HostError{Reason: "forbidden", Message: "no grant"}))
	if errorNames[tag] != "forbidden" || msg != "no grant" {
		t.Fatalf("got %s %q", errorNames[tag], msg)
	}
	tag, msg = hostErrorOf(errors.New("bad label"))
	if errorNames[tag] != "other" || msg != "bad label" {
		t.Fatalf("got %s %q", errorNames[tag], msg)
	}
}

func TestAPanicInReconcileBecomesAnErrorNamingThePanickingLine(t *testing.T) {
	_, err := callReconcile(func() (Result, error) {
		var m map[string]int
		m["x"] = 1 // panics: assignment to entry in nil map
		return Result{}, nil
	})
	var p *PanicError
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "errors_test.go:") {
		t.Fatalf("got %v", err)
	}
	if reconcileErrorOf(err).tag != retryableTag {
		t.Fatal("a panic is retryable")
	}
}

func TestAPanicInMapBecomesAnError(t *testing.T) {
	keys, err := callMap(func() ([]Key, error) { panic("no keys") })
	if keys != nil || err == nil || !strings.HasPrefix(err.Error(), "panic: no keys at ") {
		t.Fatalf("got %v, %v", keys, err)
	}
}
