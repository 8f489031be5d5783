package kubewasm

// Options of reads and writes: list paging, patch and delete preconditions, deletion
// propagation. Pure Go, as the WIT records they lower to.

// DefaultPageSize is how many objects Iterate reads at once when ListOptions.Limit is 0: a
// page of a few hundred KiB for typical objects, far under the SDK's ReceiveBytes.
const DefaultPageSize = 100

// ListOptions narrow and page a cached list; the zero value lists everything in one page. The
// fields of client-go's metav1.ListOptions with the same purpose.
type ListOptions struct {
	// Namespace, if set, lists only that namespace.
	Namespace string
	// LabelSelector, if set, lists only objects whose labels match (e.g. "app=web,tier in (a,b)").
	LabelSelector string
	// FieldSelector, if set, lists only objects whose fields match: "field=value",
	// "field==value" or "field!=value" terms over metadata.name and metadata.namespace.
	FieldSelector string
	// Limit, if positive, returns at most this many objects in the page.
	Limit uint32
	// Continue is the previous page's Continue, to read the next page; "" for the first.
	Continue string
}

// Page is one page of a cached list.
type Page[T any] struct {
	// Items are the page's objects, in namespace/name order.
	Items []T
	// Continue, passed as ListOptions.Continue, reads the next page; "" on the last page.
	Continue string
}

// PatchType is the kind of patch Patch sends.
type PatchType uint32

// The patch types of WIT `client.patch-type`.
const (
	MergePatch PatchType = iota
	JSONPatch
	StrategicMergePatch
)

// Preconditions the object must meet for a patch or delete to happen, checked by the API
// server with the write (metav1.Preconditions); a failure is a "conflict" HostError. The zero
// value has none.
type Preconditions struct {
	// ResourceVersion, if set: nothing changed the object since it was read.
	ResourceVersion string
	// UID, if set: it is the same object, not one deleted and recreated under the same name.
	UID string
}

// PreconditionsOf are obj's resourceVersion and uid as read: the write acts on that very
// object and no newer one.
func PreconditionsOf(obj Object) Preconditions {
	m := obj.GetObjectMeta()
	return Preconditions{ResourceVersion: m.ResourceVersion, UID: m.UID}
}

// PropagationPolicy says what happens to an object's dependents when it is deleted
// (metav1.DeletionPropagation).
type PropagationPolicy uint8

const (
	// DefaultPropagation leaves the choice to the host: background, as kubectl delete does.
	DefaultPropagation PropagationPolicy = iota
	// Background deletes the object at once; the garbage collector deletes dependents after.
	Background
	// Foreground keeps the object until every dependent with blockOwnerDeletion is gone.
	Foreground
	// Orphan keeps the dependents, removing their ownerReferences to the object.
	Orphan
)

type deleteOptions struct {
	preconditions Preconditions
	propagation   PropagationPolicy
}

// DeleteOption is an option of Delete: Preconditions or a PropagationPolicy.
type DeleteOption interface{ applyDelete(*deleteOptions) }

func (p Preconditions) applyDelete(o *deleteOptions)     { o.preconditions = p }
func (p PropagationPolicy) applyDelete(o *deleteOptions) { o.propagation = p }
