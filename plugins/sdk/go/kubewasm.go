//go:build wasip1

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
// kubewasm/<plugin>. A failing host call returns a *HostError; an error (or panic) out of
// Reconcile is retried with backoff. Every reconcile runs in a fresh instance unless the
// operator configures reuse: keep no state in package variables.
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
	// panicking) retries the key with backoff.
	Reconcile(ctx context.Context, req Request) (Result, error)
}

// Mapper is implemented by a Reconciler that watches other kinds: it maps a changed object of
// a watched kind to the keys of the for kind to reconcile.
type Mapper interface {
	Map(kind Kind, object Unstructured) []Key
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

// IsConflict reports whether err is a host "conflict" (the object exists, or a field is owned
// by another manager).
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
	// Attempt counts the failed reconciles of this key in a row (0 on a first try).
	Attempt uint32
}

// Result says what to do after a successful reconcile; the zero value means done.
type Result struct {
	// RequeueAfter, if positive, reconciles the key again after this long.
	RequeueAfter time.Duration
}

// Key names an object of the for kind, for Map functions.
type Key struct{ Namespace, Name string }

type watch struct {
	kind     Kind
	selector string
}

type index struct {
	kind         Kind
	name, source string
	builtin      bool
}

// Registration is what the plugin reconciles, owns, watches, reads and writes.
type Registration struct {
	forKind             Kind
	selector            string
	owns, reads, writes []Kind
	watches             []watch
	indexes             []index
	maxConcurrent       uint32
}

// For starts a registration reconciling kind.
func For(kind Kind) *Registration { return &Registration{forKind: kind} }

// Selector reconciles only objects matching a label selector.
func (r *Registration) Selector(s string) *Registration { r.selector = s; return r }

// Owns declares a kind the plugin creates and controls.
func (r *Registration) Owns(k Kind) *Registration { r.owns = append(r.owns, k); return r }

// Watches declares a kind whose changes map to keys through the Reconciler's Map.
func (r *Registration) Watches(k Kind, selector string) *Registration {
	r.watches = append(r.watches, watch{k, selector})
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
