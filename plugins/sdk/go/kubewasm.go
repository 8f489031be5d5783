//go:build wasip1

// Package kubewasm writes kubewasm reconcile plugins in Go (GOOS=wasip1, go:wasmexport, made a
// component with wasm-tools and the WASI preview1 reactor adapter; `make plugins` does it).
//
// A plugin registers one reconcile function in init:
//
//	func init() {
//		kubewasm.Register(kubewasm.Reconciles(namespace).Owns(configMap), reconcile)
//	}
//	func main() {}
//
// Objects are JSON maps; cache reads are local, writes go to the API server with field manager
// kubewasm/<plugin>. A failing host call returns a *HostError; an error (or panic) out of the
// reconcile function is retried with backoff. Every reconcile runs in a fresh instance: keep no
// state in package variables.
package kubewasm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Object is a Kubernetes object as JSON.
type Object = map[string]any

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

// KindOf is the kind of a JSON object.
func KindOf(o Object) Kind {
	api, _ := o["apiVersion"].(string)
	kind, _ := o["kind"].(string)
	return Kind{api, kind}
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
func IsNotFound(err error) bool {
	var h *HostError
	return errors.As(err, &h) && h.Reason == "not-found"
}

// Request is one key to reconcile; Namespace is "" for cluster-scoped kinds.
type Request struct {
	Kind      Kind
	Namespace string
	Name      string
	Attempt   uint32
}

// Result says what to do after a successful reconcile; the zero value means done.
type Result struct {
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
	reconcile           func(Request) (Result, error)
	mapper              func(Kind, Object) []Key
}

// Reconciles starts a registration for kind.
func Reconciles(kind Kind) *Registration { return &Registration{forKind: kind} }

// Selector reconciles only objects matching a label selector.
func (r *Registration) Selector(s string) *Registration { r.selector = s; return r }

// Owns declares a kind the plugin creates and controls.
func (r *Registration) Owns(k Kind) *Registration { r.owns = append(r.owns, k); return r }

// Watches declares a kind whose changes map to keys through Map.
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

// MaxConcurrent asks for n concurrent reconciles (the operator's setting wins).
func (r *Registration) MaxConcurrent(n uint32) *Registration { r.maxConcurrent = n; return r }

// Map sets the function mapping a change of a watched kind to keys of the for kind.
func (r *Registration) Map(f func(Kind, Object) []Key) *Registration { r.mapper = f; return r }

var registered *Registration

// Register makes reconcile the plugin's entry point. Call it once, from init.
func Register(r *Registration, reconcile func(Request) (Result, error)) {
	r.reconcile = reconcile
	registered = r
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func parse(kind Kind, raw []byte) (Object, error) {
	var o Object
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, err
	}
	if _, ok := o["apiVersion"]; !ok {
		o["apiVersion"] = kind.APIVersion
	}
	if _, ok := o["kind"]; !ok {
		o["kind"] = kind.Kind
	}
	return o, nil
}

// Get is the cached object (namespace "" for cluster-scoped kinds), or nil if not cached.
func Get(kind Kind, namespace, name string) (Object, error) {
	raw, ok, err := cacheGet(kind, opt(namespace), name)
	if err != nil || !ok {
		return nil, err
	}
	return parse(kind, raw)
}

// List is the cached objects of kind, optionally in one namespace and matching a selector.
func List(kind Kind, namespace, selector string) ([]Object, error) {
	raws, err := cacheList(kind, opt(namespace), opt(selector))
	return parseAll(kind, raws, err)
}

// ByIndex is the cached objects of kind whose index has value.
func ByIndex(kind Kind, index, value string) ([]Object, error) {
	raws, err := cacheByIndex(kind, index, value)
	return parseAll(kind, raws, err)
}

func parseAll(kind Kind, raws [][]byte, err error) ([]Object, error) {
	if err != nil {
		return nil, err
	}
	out := make([]Object, 0, len(raws))
	for _, raw := range raws {
		o, err := parse(kind, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

func roundTrip(obj any, call func([]byte) ([]byte, error)) (Object, error) {
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	raw, err := call(body)
	if err != nil {
		return nil, err
	}
	var out Object
	return out, json.Unmarshal(raw, &out)
}

// Apply server-side applies obj; force takes ownership of fields other managers set.
func Apply(obj any, force bool) (Object, error) {
	return roundTrip(obj, func(b []byte) ([]byte, error) { return clientApply(b, force) })
}

// ApplyStatus server-side applies the status of obj.
func ApplyStatus(obj any) (Object, error) { return roundTrip(obj, clientApplyStatus) }

// Create creates obj; a "conflict" HostError if it exists.
func Create(obj any) (Object, error) { return roundTrip(obj, clientCreate) }

// PatchType is the kind of patch Patch sends.
type PatchType uint32

// The patch types of WIT `client.patch-type`.
const (
	MergePatch PatchType = iota
	JSONPatch
	StrategicMergePatch
)

// Patch patches an object.
func Patch(kind Kind, namespace, name string, patchType PatchType, body any) (Object, error) {
	return roundTrip(body, func(b []byte) ([]byte, error) {
		return clientPatch(kind, opt(namespace), name, patchType, b)
	})
}

// Delete deletes an object; one that is already gone is not an error.
func Delete(kind Kind, namespace, name string) error {
	if err := clientDelete(kind, opt(namespace), name); err != nil && !IsNotFound(err) {
		return err
	}
	return nil
}

func metadata(o Object) map[string]any {
	m, _ := o["metadata"].(map[string]any)
	return m
}

func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

func publish(regarding Object, warning bool, reason, note string) error {
	meta := metadata(regarding)
	return eventsPublish(KindOf(regarding), opt(str(meta, "namespace")), str(meta, "name"), warning, reason, note)
}

// Normal publishes a routine event about regarding.
func Normal(regarding Object, reason, note string) error {
	return publish(regarding, false, reason, note)
}

// Warning publishes an event about regarding that needs a person's attention.
func Warning(regarding Object, reason, note string) error {
	return publish(regarding, true, reason, note)
}

// Logf writes a line to the host's log at info level.
func Logf(format string, args ...any) { logLine(2, fmt.Sprintf(format, args...)) }

// Settings decodes the operator's settings into v, which holds the defaults; an unknown key is
// an error, so a typo never silently falls back to a default.
func Settings(v any) error {
	dec := json.NewDecoder(bytes.NewReader(configSettings()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	return nil
}

// ControllerReference is an ownerReference making owner the controller of an object.
func ControllerReference(owner Object) map[string]any {
	meta := metadata(owner)
	return map[string]any{
		"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": str(meta, "name"),
		"uid": str(meta, "uid"), "controller": true, "blockOwnerDeletion": true,
	}
}

// IsControlledBy reports whether owner (by UID) is the controller of obj.
func IsControlledBy(obj, owner Object) bool {
	uid := str(metadata(owner), "uid")
	refs, _ := metadata(obj)["ownerReferences"].([]any)
	for _, r := range refs {
		ref, _ := r.(map[string]any)
		if ref["controller"] == true && ref["uid"] == uid {
			return true
		}
	}
	return false
}
