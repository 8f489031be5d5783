//go:build wasip1

package kubewasm

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Reads of the host's informer cache (local, never an API call) and writes to the API server
// with the plugin's field manager. Every object is any Go value encoding to Kubernetes JSON:
// the plugin's own structs, Unstructured, or k8s.io/api types.

// kindSetter is implemented by types embedding TypeMeta, and by Unstructured.
type kindSetter interface{ setKind(Kind) }

func decode[T any](kind Kind, raw []byte) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", kind.Kind, err)
	}
	if s, ok := any(v).(kindSetter); ok {
		s.setKind(kind)
	}
	return v, nil
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

func remarshal(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
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
// selector ("" for all).
func List[T any](kind Kind, namespace, selector string) ([]T, error) {
	raws, err := cacheList(kind, opt(namespace), opt(selector))
	return decodeAll[T](kind, raws, err)
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

// ApplyStatus server-side applies the status of obj; returns the object as stored.
func ApplyStatus[T any](obj *T) (*T, error) { return write(obj, clientApplyStatus) }

// Create creates obj; a "conflict" HostError if it exists. Returns the object as stored.
func Create[T any](obj *T) (*T, error) { return write(obj, clientCreate) }

// PatchType is the kind of patch Patch sends.
type PatchType uint32

// The patch types of WIT `client.patch-type`.
const (
	MergePatch PatchType = iota
	JSONPatch
	StrategicMergePatch
)

// Patch patches the object of kind named name with body (encoded as JSON); returns the object
// as stored.
func Patch[T any](kind Kind, namespace, name string, patchType PatchType, body any) (*T, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	raw, err := clientPatch(kind, opt(namespace), name, patchType, b)
	if err != nil {
		return nil, err
	}
	return decode[T](kind, raw)
}

// Delete deletes an object; one that is already gone is not an error.
func Delete(kind Kind, namespace, name string) error {
	if err := clientDelete(kind, opt(namespace), name); err != nil && !IsNotFound(err) {
		return err
	}
	return nil
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
