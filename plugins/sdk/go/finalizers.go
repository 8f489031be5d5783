package kubewasm

// Finalizers: run a cleanup before an object goes, and let it go only once the cleanup
// succeeded (controller-runtime's controllerutil finalizer helpers, kube-rs' finalizer).
//
// Every finalizer write is a merge patch of the whole metadata.finalizers list (a merge patch
// replaces lists) carrying the object's resourceVersion and uid as preconditions: a write
// decided on a cached copy never drops a finalizer another controller added meanwhile, nor
// touches a new object of the same name. A failed precondition is a "conflict" HostError; let
// it fail the reconcile, which is retried once the cache caught up.

import (
	"encoding/json"
	"slices"
)

// finalizerPatch sends a merge patch with preconditions; set by client.go in a plugin, by
// tests on the build machine.
var finalizerPatch func(kind Kind, namespace, name string, body []byte, pre Preconditions) ([]byte, error)

// objectPtr is a pointer to an object type: *T where *T has the Object methods.
type objectPtr[T any] interface {
	*T
	Object
}

// Finalizers are the finalizers of obj.
func Finalizers(obj Object) []string { return slices.Clone(obj.GetObjectMeta().Finalizers) }

// HasFinalizer reports whether obj carries finalizer.
func HasFinalizer(obj Object, finalizer string) bool {
	return slices.Contains(obj.GetObjectMeta().Finalizers, finalizer)
}

// IsDeleting reports whether obj is being deleted (has a deletionTimestamp).
func IsDeleting(obj Object) bool { return obj.GetObjectMeta().IsBeingDeleted() }

func writeFinalizers[T any, PT objectPtr[T]](obj PT, names []string) (PT, error) {
	meta := obj.GetObjectMeta()
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": names}})
	if err != nil {
		return nil, err
	}
	kind := obj.GroupVersionKind()
	raw, err := finalizerPatch(kind, meta.Namespace, meta.Name, body, PreconditionsOf(obj))
	if err != nil {
		return nil, err
	}
	return decode[T](kind, raw)
}

// AddFinalizer adds finalizer to obj (as read: its kind, resourceVersion and uid) unless it has
// it; returns the object as stored. A "conflict" HostError if the object changed since read.
func AddFinalizer[T any, PT objectPtr[T]](obj PT, finalizer string) (PT, error) {
	names := Finalizers(obj)
	if slices.Contains(names, finalizer) {
		return obj, nil
	}
	return writeFinalizers[T](obj, append(names, finalizer))
}

// RemoveFinalizer removes finalizer from obj (as read) if it has it; returns the object as
// stored, or nil if that removal let it go. A "conflict" HostError if it changed since read.
func RemoveFinalizer[T any, PT objectPtr[T]](obj PT, finalizer string) (PT, error) {
	names := Finalizers(obj)
	if !slices.Contains(names, finalizer) {
		return obj, nil
	}
	stored, err := writeFinalizers[T](obj, slices.DeleteFunc(names, func(n string) bool { return n == finalizer }))
	if IsNotFound(err) {
		return nil, nil
	}
	return stored, err
}

// Finalize runs apply with finalizer in place, or cleanup when obj is being deleted. A live
// object without the finalizer gets it first (apply sees the object as stored); an object being
// deleted that carries it gets cleanup, and the finalizer is removed once cleanup succeeded (an
// error keeps it, so the cleanup is retried); one being deleted without it is left alone.
// Returns what apply or cleanup returned.
func Finalize[T any, PT objectPtr[T]](obj PT, finalizer string, apply, cleanup func(PT) (Result, error)) (Result, error) {
	if !IsDeleting(obj) {
		stored, err := AddFinalizer[T](obj, finalizer)
		if err != nil {
			return Result{}, err
		}
		return apply(stored)
	}
	if !HasFinalizer(obj, finalizer) {
		return Result{}, nil
	}
	result, err := cleanup(obj)
	if err != nil {
		return result, err
	}
	if _, err := RemoveFinalizer[T](obj, finalizer); err != nil {
		return Result{}, err
	}
	return result, nil
}
