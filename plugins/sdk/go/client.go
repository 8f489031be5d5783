//go:build wasip1

package kubewasm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
)

// Reads of the host's informer cache (local, never an API call) and writes to the API server
// with the plugin's field manager. Every object is any Go value encoding to Kubernetes JSON:
// the plugin's own structs, Unstructured, or k8s.io/api types.

// finalizerPatch writes finalizers with a merge patch (finalizers.go).
func init() {
	finalizerPatch = func(kind Kind, namespace, name string, body []byte, pre Preconditions) ([]byte, error) {
		return clientPatch(kind, namespace, name, MergePatch, body, pre)
	}
}

func decodeAll[T any](kind Kind, raws [][]byte, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(raws))
	for _, raw := range raws {
		v, err := decode[T](kind, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, *v)
	}
	return out, nil
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Get is the cached object of kind (namespace "" for cluster-scoped kinds), or nil if the
// cache does not hold it.
func Get[T any](kind Kind, namespace, name string) (*T, error) {
	raw, ok, err := cacheGet(kind, opt(namespace), name)
	if err != nil || !ok {
		return nil, err
	}
	return decode[T](kind, raw)
}

// List is the cached objects of kind, in one namespace ("" for all) and matching a label
// selector ("" for all), in one page.
func List[T any](kind Kind, namespace, selector string) ([]T, error) {
	page, err := ListPage[T](kind, ListOptions{Namespace: namespace, LabelSelector: selector})
	return page.Items, err
}

// ListPage is one page of the cached objects of kind matching o, in namespace/name order.
func ListPage[T any](kind Kind, o ListOptions) (Page[T], error) {
	raws, next, err := cacheList(kind, o)
	items, err := decodeAll[T](kind, raws, err)
	if err != nil {
		return Page[T]{}, err
	}
	return Page[T]{Items: items, Continue: next}, nil
}

// Iterate yields every cached object of kind matching o, read o.Limit at a time (100 if 0), so
// the plugin holds one page at once rather than the whole kind. It stops at the first error,
// which it yields:
//
//	for ns, err := range kubewasm.Iterate[Namespace](namespaceKind, kubewasm.ListOptions{}) {
//		if err != nil {
//			return kubewasm.Result{}, err
//		}
//		...
//	}
func Iterate[T any](kind Kind, o ListOptions) iter.Seq2[T, error] {
	if o.Limit == 0 {
		o.Limit = DefaultPageSize
	}
	return func(yield func(T, error) bool) {
		for {
			page, err := ListPage[T](kind, o)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, item := range page.Items {
				if !yield(item, nil) {
					return
				}
			}
			if page.Continue == "" {
				return
			}
			o.Continue = page.Continue
		}
	}
}

// ByIndex is the cached objects of kind whose index has value. Built-in indexes: "namespace",
// "label" (values "key=value"), "controller-owner" (the owner's UID).
func ByIndex[T any](kind Kind, index, value string) ([]T, error) {
	raws, err := cacheByIndex(kind, index, value)
	return decodeAll[T](kind, raws, err)
}

func write[T any](obj *T, call func([]byte) ([]byte, error)) (*T, error) {
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	raw, err := call(body)
	if err != nil {
		return nil, err
	}
	var kind Kind
	if o, ok := any(obj).(Object); ok {
		kind = o.GroupVersionKind()
	}
	return decode[T](kind, raw)
}

// Apply server-side applies obj (apiVersion, kind, metadata.name and, for namespaced kinds,
// metadata.namespace set); force takes ownership of fields other managers set. Returns the
// object as stored.
func Apply[T any](obj *T, force bool) (*T, error) {
	return write(obj, func(b []byte) ([]byte, error) { return clientApply(b, force) })
}

// ApplyStatus server-side applies the status of obj; returns the object as stored. force takes
// over status fields other managers own (a "conflict" HostError otherwise); contract 0.1 always
// forced, which silently took over status fields other controllers own.
func ApplyStatus[T any](obj *T, force bool) (*T, error) {
	return write(obj, func(b []byte) ([]byte, error) { return clientApplyStatus(b, force) })
}

// Create creates obj; a "conflict" HostError if it exists. Returns the object as stored.
func Create[T any](obj *T) (*T, error) { return write(obj, clientCreate) }

type patchCall func(Kind, string, string, PatchType, []byte, Preconditions) ([]byte, error)

func patch[T any](call patchCall, kind Kind, namespace, name string, patchType PatchType, body any, pre []Preconditions) (*T, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	var p Preconditions
	if len(pre) > 0 {
		p = pre[len(pre)-1]
	}
	raw, err := call(kind, namespace, name, patchType, b, p)
	if err != nil {
		return nil, err
	}
	return decode[T](kind, raw)
}

// Patch patches the object of kind named name with body (encoded as JSON), if it meets the
// preconditions given (at most one; PreconditionsOf(obj) for the object as read; a "conflict"
// HostError otherwise); returns the object as stored.
func Patch[T any](kind Kind, namespace, name string, patchType PatchType, body any, pre ...Preconditions) (*T, error) {
	return patch[T](clientPatch, kind, namespace, name, patchType, body, pre)
}

// PatchStatus patches the status subresource of the object, as Patch does the object
// (controller-runtime's Status().Patch): for a controller that updates one condition without
// owning the whole status by apply.
func PatchStatus[T any](kind Kind, namespace, name string, patchType PatchType, body any, pre ...Preconditions) (*T, error) {
	return patch[T](clientPatchStatus, kind, namespace, name, patchType, body, pre)
}

// Delete deletes an object; one that is already gone is not an error. Options: Preconditions
// (PreconditionsOf(obj): delete only the object as read) and a PropagationPolicy.
func Delete(kind Kind, namespace, name string, opts ...DeleteOption) error {
	var o deleteOptions
	for _, opt := range opts {
		opt.applyDelete(&o)
	}
	if err := clientDelete(kind, namespace, name, o); err != nil && !IsNotFound(err) {
		return err
	}
	return nil
}

// GetUncached reads the object straight from the API server, past the cache, or nil if it
// does not exist: for the few reads that must see a write the cache may not have caught up
// with (controller-runtime's APIReader). Granted like a cache read; it costs an API call.
func GetUncached[T any](kind Kind, namespace, name string) (*T, error) {
	raw, ok, err := clientGet(kind, opt(namespace), name)
	if err != nil || !ok {
		return nil, err
	}
	return decode[T](kind, raw)
}

func publish(regarding Object, warning bool, reason, note string) error {
	meta := regarding.GetObjectMeta()
	return eventsPublish(regarding.GroupVersionKind(), opt(meta.Namespace), meta.Name, warning, reason, note)
}

// Normal publishes a routine event about regarding (reason in UpperCamelCase, note a sentence).
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
