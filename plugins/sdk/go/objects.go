package kubewasm

import (
	"encoding/json"
	"fmt"
)

// Kubernetes object types, small: the fields every object has, shaped like k8s.io/api's
// metav1.TypeMeta and metav1.ObjectMeta so a plugin's own types read the same. Every field is
// omitempty: server-side apply owns exactly the fields an applied object sets.

// TypeMeta is an object's apiVersion and kind. Embed it in an object type.
type TypeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// GroupVersionKind is the object's kind.
func (t TypeMeta) GroupVersionKind() Kind { return Kind{t.APIVersion, t.Kind} }

// setKind fills in the kind a cache read asked for when the JSON had none.
func (t *TypeMeta) setKind(k Kind) {
	if t.APIVersion == "" && t.Kind == "" {
		t.APIVersion, t.Kind = k.APIVersion, k.Kind
	}
}

// ObjectMeta is an object's metadata. Embed it with the tag `json:"metadata"`.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	GenerateName      string            `json:"generateName,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	CreationTimestamp string            `json:"creationTimestamp,omitempty"`
	DeletionTimestamp string            `json:"deletionTimestamp,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	OwnerReferences   []OwnerReference  `json:"ownerReferences,omitempty"`
	Finalizers        []string          `json:"finalizers,omitempty"`
}

// GetObjectMeta is the object's metadata, to read and change.
func (m *ObjectMeta) GetObjectMeta() *ObjectMeta { return m }

// IsBeingDeleted reports whether the object has a deletion timestamp.
func (m *ObjectMeta) IsBeingDeleted() bool { return m.DeletionTimestamp != "" }

// OwnerReference names an owner of an object.
type OwnerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         *bool  `json:"controller,omitempty"`
	BlockOwnerDeletion *bool  `json:"blockOwnerDeletion,omitempty"`
}

// Object is what the helpers need of an object: its kind and its metadata. A pointer to a
// struct embedding TypeMeta and ObjectMeta is one.
type Object interface {
	GroupVersionKind() Kind
	GetObjectMeta() *ObjectMeta
}

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

func remarshal(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}

// Unstructured is an object as a JSON map, for kinds without a Go type.
type Unstructured map[string]any

// GroupVersionKind is the object's kind.
func (u Unstructured) GroupVersionKind() Kind {
	api, _ := u["apiVersion"].(string)
	kind, _ := u["kind"].(string)
	return Kind{api, kind}
}

// setKind fills in the kind a cache read asked for when the JSON had none.
func (u Unstructured) setKind(k Kind) {
	if _, ok := u["apiVersion"]; !ok {
		u["apiVersion"] = k.APIVersion
	}
	if _, ok := u["kind"]; !ok {
		u["kind"] = k.Kind
	}
}

// GetObjectMeta is a copy of the object's metadata (changing it leaves the map alone).
func (u Unstructured) GetObjectMeta() *ObjectMeta {
	var m ObjectMeta
	if raw, ok := u["metadata"]; ok {
		_ = remarshal(raw, &m)
	}
	return &m
}

// ControllerReference is an ownerReference making owner the controller of an object, with
// blockOwnerDeletion set (as controller-runtime's SetControllerReference does).
func ControllerReference(owner Object) OwnerReference {
	k, meta := owner.GroupVersionKind(), owner.GetObjectMeta()
	yes := true
	return OwnerReference{APIVersion: k.APIVersion, Kind: k.Kind, Name: meta.Name, UID: meta.UID,
		Controller: &yes, BlockOwnerDeletion: &yes}
}

// SetControllerReference makes owner the controller of object: it adds the reference, or
// replaces one to the same owner. Another controller is a "conflict" HostError.
func SetControllerReference(owner, object Object) error {
	ref := ControllerReference(owner)
	meta := object.GetObjectMeta()
	for i, r := range meta.OwnerReferences {
		switch {
		case r.UID == ref.UID:
			meta.OwnerReferences[i] = ref
			return nil
		case r.Controller != nil && *r.Controller:
			return &HostError{Reason: "conflict", Message: object.GroupVersionKind().Kind + " " + meta.Name +
				" is already controlled by " + r.Kind + " " + r.Name}
		}
	}
	meta.OwnerReferences = append(meta.OwnerReferences, ref)
	return nil
}

// IsControlledBy reports whether owner (by UID) is the controller of object.
func IsControlledBy(object, owner Object) bool {
	uid := owner.GetObjectMeta().UID
	for _, r := range object.GetObjectMeta().OwnerReferences {
		if r.Controller != nil && *r.Controller && r.UID == uid {
			return true
		}
	}
	return false
}
