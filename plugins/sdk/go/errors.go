package kubewasm

// What a reconcile's error tells the host (WIT `reconcile-error`), and what a Map's error is
// (WIT `types.error`). Pure Go: unit tests run on the build machine (`go test`).

import (
	"errors"
	"fmt"
	"path"
	"runtime"
	"strings"
	"time"
)

// errorNames are the cases of WIT `types.error`, in order.
var errorNames = []string{"not-found", "forbidden", "conflict", "invalid", "unavailable", "other"}

// TerminalError is a reconcile failure that retrying cannot fix: the object itself is wrong (an
// invalid spec). The key is not retried until the object changes (controller-runtime's
// reconcile.TerminalError; counted in controller_runtime_terminal_reconcile_errors_total).
// Return Terminal(err) from Reconcile.
type TerminalError struct{ Err error }

func (e *TerminalError) Error() string { return e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// Terminal wraps err so the key is not retried (see TerminalError).
func Terminal(err error) error { return &TerminalError{Err: err} }

// RequeueAfterError is a reconcile failure to try again after exactly After, not after the
// key's backoff (which does not advance), logging Reason (e.g. "waiting for Secret db").
// Return RequeueAfter(d, reason) from Reconcile; for a success that wants a periodic re-check,
// return Result{RequeueAfter: d} instead.
type RequeueAfterError struct {
	After  time.Duration
	Reason string
}

func (e *RequeueAfterError) Error() string { return e.Reason }

// RequeueAfter is an error that retries the key after d (see RequeueAfterError).
func RequeueAfter(d time.Duration, reason string) error {
	return &RequeueAfterError{After: d, Reason: reason}
}

// The cases of WIT `reconcile-error`, in order.
const (
	retryableTag = iota
	terminalTag
	requeueAfterTag
)

// reconcileError is a lowered WIT `reconcile-error`.
type reconcileError struct {
	tag     int
	message string
	afterMs uint64
}

// reconcileErrorOf says how the host retries the key after err: a TerminalError (anywhere in
// err's chain) never, a RequeueAfterError after its delay, anything else with backoff.
func reconcileErrorOf(err error) reconcileError {
	var terminal *TerminalError
	var requeue *RequeueAfterError
	switch {
	case errors.As(err, &requeue):
		return reconcileError{tag: requeueAfterTag, message: requeue.Reason, afterMs: millis(requeue.After)}
	case errors.As(err, &terminal):
		return reconcileError{tag: terminalTag, message: err.Error()}
	default:
		return reconcileError{tag: retryableTag, message: err.Error()}
	}
}

// hostErrorOf is the WIT `types.error` (its case and message) for an error out of Map: a
// HostError keeps its case, anything else is "other".
func hostErrorOf(err error) (uint8, string) {
	var h *HostError
	if errors.As(err, &h) {
		for i, name := range errorNames {
			if name == h.Reason {
				return uint8(i), h.Message
			}
		}
	}
	return uint8(len(errorNames) - 1), err.Error()
}

// millis is d in whole milliseconds, rounded; 0 for d ≤ 0.
func millis(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64(d.Round(time.Millisecond) / time.Millisecond)
}

// PanicError is a panic out of Reconcile or Map, with where it happened: retried with backoff,
// as the other SDKs do with exceptions.
type PanicError struct {
	Value any
	// Location is "file.go:12 in function" of the panicking plugin code.
	Location string
}

func (e *PanicError) Error() string {
	if e.Location == "" {
		return fmt.Sprintf("panic: %v", e.Value)
	}
	return fmt.Sprintf("panic: %v at %s", e.Value, e.Location)
}

// panicLocation is the innermost frame of plugin code on a panicking stack: not the Go
// runtime's, not this SDK's (a panic in the SDK names the plugin line that called it).
func panicLocation() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		sdk := strings.HasPrefix(f.Function, "kubewasm.dev/sdk.") && !strings.HasSuffix(f.File, "_test.go")
		if f.Function != "" && !strings.HasPrefix(f.Function, "runtime.") && !sdk {
			return fmt.Sprintf("%s:%d in %s", path.Base(f.File), f.Line, f.Function)
		}
		if !more {
			return ""
		}
	}
}

// callReconcile turns a panic into the reconcile's error.
func callReconcile(fn func() (Result, error)) (result Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Location: panicLocation()}
		}
	}()
	return fn()
}

// callMap turns a panic into the map's error.
func callMap(fn func() ([]Key, error)) (keys []Key, err error) {
	defer func() {
		if p := recover(); p != nil {
			keys, err = nil, &PanicError{Value: p, Location: panicLocation()}
		}
	}()
	return fn()
}
