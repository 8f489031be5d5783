// Package kubewasm writes kubewasm reconcile plugins in Go: GOOS=wasip1 GOARCH=wasm, made a
// component by `make go-plugins` (go build -buildmode=c-shared, then tools/go-component).
//
// A plugin implements Reconciler and registers it in init:
//
//	type namespaceDefaults struct{}
//
//	func (namespaceDefaults) Describe() *kubewasm.Registration {
//		return kubewasm.For(namespaceKind).Owns(configMapKind)
//	}
//
//	func (namespaceDefaults) Reconcile(ctx context.Context, req kubewasm.Request) (kubewasm.Result, error) {
//		ns, err := kubewasm.Get[Namespace](namespaceKind, "", req.Name)
//		...
//	}
//
//	func init() { kubewasm.Register(namespaceDefaults{}) }
//	func main() {}
//
// Objects are Go values encoded as Kubernetes JSON: structs that embed TypeMeta and ObjectMeta
// (like k8s.io/api's types, which work too but make the component ~5x bigger), or
// Unstructured maps. Cache reads are local; writes go to the API server with field manager
// kubewasm/<plugin>. A failing host call returns a *HostError. The error out of Reconcile says
// how the key is retried: Terminal(err) never (until the object changes), RequeueAfter(d,
// reason) after d, any other error (or a panic) with backoff. Durations are time.Duration.
// Every reconcile runs in a fresh instance unless the operator configures reuse: keep no state
// in package variables.
//
// The SDK speaks contract kubewasm:controller@0.3.0 (wit/controller@0.3.0). Helpers: finalizers
// (Finalize, AddFinalizer, RemoveFinalizer, HasFinalizer), conditions (SetStatusCondition and
// the rest of apimachinery's meta condition helpers), paging (ListPage, Iterate), status writes
// (ApplyStatus, PatchStatus), preconditions (PreconditionsOf) and uncached reads (GetUncached).
package kubewasm

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Reconciler is a plugin: what it watches and how it reconciles one key.
type Reconciler interface {
	// Describe says what the plugin reconciles, owns, watches, reads and writes; the host calls
	// it once when it loads the plugin.
	Describe() *Registration
	// Reconcile brings the object named by req to its desired state. Returning an error (or
	// panicking) retries the key with backoff, unless the error is Terminal (not retried) or
	// RequeueAfter (retried after its delay).
	Reconcile(ctx context.Context, req Request) (Result, error)
}

// Mapper is implemented by a Reconciler that watches other kinds: it maps a changed object of
// a watched kind to the keys of the for kind to reconcile. An error (a failed cache read, say)
// retries the change with backoff, at most 5 times; a HostError keeps its reason.
type Mapper interface {
	Map(kind Kind, object Unstructured) ([]Key, error)
}

// InfallibleMapper is contract 0.1's Map, still accepted: it cannot fail.
type InfallibleMapper interface {
	Map(kind Kind, object Unstructured) []Key
}

// mapperOf is r's Map function, or nil if r watches nothing.
func mapperOf(r Reconciler) func(Kind, Unstructured) ([]Key, error) {
	switch m := r.(type) {
	case Mapper:
		return m.Map
	case InfallibleMapper:
		return func(k Kind, o Unstructured) ([]Key, error) { return m.Map(k, o), nil }
	}
	return nil
}

// Kind is a Kubernetes kind as it appears in JSON: Kind{"apps/v1", "Deployment"}.
type Kind struct {
	APIVersion string
	Kind       string
}

func (k Kind) groupVersion() (string, string) {
	if i := strings.LastIndexByte(k.APIVersion, '/'); i >= 0 {
		return k.APIVersion[:i], k.APIVersion[i+1:]
	}
	return "", k.APIVersion
}

func kindOf(group, version, kind string) Kind {
	if group == "" {
		return Kind{version, kind}
	}
	return Kind{group + "/" + version, kind}
}

// HostError is a failed host call; Reason is the WIT error case ("not-found", "forbidden",
// "conflict", "invalid", "unavailable", "other").
type HostError struct {
	Reason  string
	Message string
}

func (e *HostError) Error() string {
	if e.Message == "" {
		return e.Reason
	}
	return e.Reason + ": " + e.Message
}

// IsNotFound reports whether err is a host "not-found".
func IsNotFound(err error) bool { return hasReason(err, "not-found") }

// IsConflict reports whether err is a host "conflict" (the object exists, a field is owned by
// another manager, or a precondition failed: re-read and try again).
func IsConflict(err error) bool { return hasReason(err, "conflict") }

func hasReason(err error, reason string) bool {
	var h *HostError
	return errors.As(err, &h) && h.Reason == reason
}

// Request is one key to reconcile; Namespace is "" for cluster-scoped kinds.
type Request struct {
	Kind      Kind
	Namespace string
	Name      string
	// Attempt counts the reconciles of this key that failed in a row with a retryable error (0
	// on a first try).
	Attempt uint32
}

// Result says what to do after a successful reconcile; the zero value means done.
type Result struct {
	// Desired, if set, is what should exist for the key: the host makes it so after Reconcile
	// returns (contract 0.3). Nil for a Reconcile that wrote what it wanted itself.
	Desired *Desired
	// RequeueAfter, if positive, reconciles the key again after this long (a periodic
	// re-check; the key's backoff is reset). For a failure retried after a delay, return
	// RequeueAfter(d, reason) as the error instead.
	RequeueAfter time.Duration
}

// Desired is what should exist for a key. The host applies each child as the plugin (with
// force; a controller ownerReference to the key's object added where the child has none),
// sends none that would change nothing, deletes what the plugin made for the key and no longer
// returns (per owned kind, see Prune), then applies Status.
type Desired struct {
	// Children are full objects (structs embedding TypeMeta and ObjectMeta, or Unstructured),
	// as Apply takes them. None prunes every child the plugin made for the key.
	Children []any
	// Status is the key object's status (the field's value); nil leaves it alone.
	Status any
}

// Prune says what happens to an owned object the plugin made for a key and no longer returns
// in its Desired children.
type Prune uint8

const (
	// PruneBackground deletes it, its own dependents after it (Kubernetes' default).
	PruneBackground Prune = iota
	// PruneForeground deletes it once its own dependents with blockOwnerDeletion are gone.
	PruneForeground
	// PruneNever leaves it: the plugin deletes what it no longer wants itself.
	PruneNever
)

// Key names an object of the for kind, for Map functions.
type Key struct{ Namespace, Name string }

// EventFilter says which events of one use of a kind (the for kind, one owned kind, one watch)
// trigger; it filters that use only, never what the cache holds. Adds and deletes always pass
// the predicates; with predicates set, an update passes if any of them changed
// (controller-runtime's GenerationChangedPredicate, LabelChangedPredicate,
// AnnotationChangedPredicate). The zero value passes everything.
type EventFilter struct {
	// Namespace, if set, passes only objects in it.
	Namespace string
	// LabelSelector, if set, passes only objects whose labels match it (an update from
	// matching to not matching still passes, so the controller sees the object leave).
	LabelSelector      string
	GenerationChanged  bool
	LabelsChanged      bool
	AnnotationsChanged bool
}

// predicateFlags is WIT `predicates`: one bit per flag, in declaration order.
func (f EventFilter) predicateFlags() uint8 {
	var b uint8
	for i, set := range []bool{f.GenerationChanged, f.LabelsChanged, f.AnnotationsChanged} {
		if set {
			b |= 1 << i
		}
	}
	return b
}

// use is one owned or watched kind with its event filter.
type use struct {
	kind   Kind
	filter EventFilter
	prune  Prune
}

type index struct {
	kind         Kind
	name, source string
	builtin      bool
}

// Registration is what the plugin reconciles, owns, watches, reads and writes.
type Registration struct {
	forKind       Kind
	forFilter     EventFilter
	owns, watches []use
	reads, writes []Kind
	indexes       []index
	maxConcurrent uint32
}

// For starts a registration reconciling kind.
func For(kind Kind) *Registration { return &Registration{forKind: kind} }

// Selector triggers reconciles only for objects of the for kind matching a label selector (the
// for filter's LabelSelector; the cache still holds every object of the kind).
func (r *Registration) Selector(s string) *Registration { r.forFilter.LabelSelector = s; return r }

// ForFilter sets which changes of the for kind trigger reconciles.
func (r *Registration) ForFilter(f EventFilter) *Registration { r.forFilter = f; return r }

// Owns declares a kind the plugin creates and controls: a change to one of its objects
// reconciles its controller owner.
func (r *Registration) Owns(k Kind) *Registration { return r.OwnsWith(k, EventFilter{}) }

// OwnsWith is Owns with a filter on which changes of the owned objects trigger.
func (r *Registration) OwnsWith(k Kind, f EventFilter) *Registration {
	r.owns = append(r.owns, use{kind: k, filter: f})
	return r
}

// Pruned sets how the owned kind k's objects a Desired plugin no longer returns are pruned
// (PruneBackground unless set). Call it after Owns.
func (r *Registration) Pruned(k Kind, p Prune) *Registration {
	for i := range r.owns {
		if r.owns[i].kind == k {
			r.owns[i].prune = p
		}
	}
	return r
}

// Watches declares a kind whose changes map to keys through the Reconciler's Map; selector
// ("" for all) filters which objects' changes are mapped.
func (r *Registration) Watches(k Kind, selector string) *Registration {
	return r.WatchesWith(k, EventFilter{LabelSelector: selector})
}

// WatchesWith is Watches with a full event filter.
func (r *Registration) WatchesWith(k Kind, f EventFilter) *Registration {
	r.watches = append(r.watches, use{kind: k, filter: f})
	return r
}

// Reads declares a further kind read from the cache (needs a grant).
func (r *Registration) Reads(k Kind) *Registration { r.reads = append(r.reads, k); return r }

// Writes declares a further kind written (needs a grant).
func (r *Registration) Writes(k Kind) *Registration { r.writes = append(r.writes, k); return r }

// FieldIndex builds index name over k from a dotted field path.
func (r *Registration) FieldIndex(k Kind, name, path string) *Registration {
	r.indexes = append(r.indexes, index{k, name, path, false})
	return r
}

// BuiltinIndex builds index name over k with an index function built into the host.
func (r *Registration) BuiltinIndex(k Kind, name, function string) *Registration {
	r.indexes = append(r.indexes, index{k, name, function, true})
	return r
}

// MaxConcurrent asks for n concurrent reconciles (the operator's setting wins).
func (r *Registration) MaxConcurrent(n uint32) *Registration { r.maxConcurrent = n; return r }

var registered Reconciler

// Register makes r the plugin. Call it once, from init.
func Register(r Reconciler) { registered = r }
