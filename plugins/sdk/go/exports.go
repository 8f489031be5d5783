//go:build wasip1

package kubewasm

import (
	"context"
	"encoding/json"
	"fmt"
)

// The world's exports. Each lowers its result into a pinned return area and returns its address.

// storeEventFilter writes event-filter { namespace, label-selector, predicates } (28 bytes) at
// addr; predicates is one byte of flags.
func storeEventFilter(addr uint32, f EventFilter) {
	storeOption(addr, f.Namespace)
	storeOption(addr+12, f.LabelSelector)
	put8(addr+24, f.predicateFlags())
}

// storeUses writes a list<watch> (gvk, then event-filter: 52 bytes each) or, with owned, a
// list<owned> (the same, then the prune enum's byte at 52: 56 bytes each).
func storeUses(addr uint32, uses []use, owned bool) {
	size := uint32(52)
	if owned {
		size = 56
	}
	base := alloc(uint32(len(uses))*size, 4)
	for i, u := range uses {
		at := base + uint32(i)*size
		storeGvk(at, u.kind)
		storeEventFilter(at+24, u.filter)
		if owned {
			put8(at+52, uint8(u.prune))
		}
	}
	put32(addr, base)
	put32(addr+4, uint32(len(uses)))
}

// exportDescribe lowers registration: for-kind at 0, for-filter at 24, owns at 52, watches at
// 60, reads at 68, writes at 76, indexes at 84, max-concurrent (option<u32>) at 92; 100 bytes.
//
//go:wasmexport describe
func exportDescribe() uint32 {
	if arenaAddrs[0] == 0 || arenaAddrs[1] == 0 { // never true; keeps the arenas linked in (arena.go)
		panic("kubewasm: no arenas")
	}
	defer resetReceive()
	pinned = nil // the previous call's results, which the host has read
	if registered == nil {
		panic("kubewasm: no reconciler registered: call kubewasm.Register in init()")
	}
	r := registered.Describe()
	ret := alloc(100, 4)
	storeGvk(ret, r.forKind)
	storeEventFilter(ret+24, r.forFilter)
	storeUses(ret+52, r.owns, true)
	storeUses(ret+60, r.watches, false)
	storeGvkList(ret+68, r.reads)
	storeGvkList(ret+76, r.writes)
	indexes := alloc(uint32(len(r.indexes))*44, 4)
	for i, ix := range r.indexes {
		at := indexes + uint32(i)*44
		storeGvk(at, ix.kind)
		storeString(at+24, ix.name)
		if ix.builtin {
			put8(at+32, 1)
		}
		storeString(at+36, ix.source)
	}
	put32(ret+84, indexes)
	put32(ret+88, uint32(len(r.indexes)))
	if r.maxConcurrent > 0 {
		put8(ret+92, 1)
		put32(ret+96, r.maxConcurrent)
	}
	return ret
}

// exportReconcile lowers result<reconciled, reconcile-error> (48 bytes, align 8): the result's
// tag at 0; a reconciled's option<desired-state> tag at 8, its children (list<list<u8>>) at 12,
// its status (option<list<u8>>) tag at 20 and bytes at 24, and its action's tag at 32 and u64
// at 40; a reconcile-error's tag at 8 and its string at 16, or its requeue { after-ms at 16,
// reason at 24 }.
//
//go:wasmexport reconcile
func exportReconcile(gp, gn, vp, vn, kp, kn, nsSome, nsp, nsn, np, nn, attempt uint32) uint32 {
	defer resetReceive()
	pinned = nil // the previous call's results, which the host has read
	req := Request{Kind: liftGvk(gp, gn, vp, vn, kp, kn), Name: liftString(np, nn), Attempt: attempt}
	if nsSome != 0 {
		req.Namespace = liftString(nsp, nsn)
	}
	result, err := callReconcile(func() (Result, error) { return registered.Reconcile(context.Background(), req) })
	var desired *loweredDesired
	if err == nil && result.Desired != nil {
		desired, err = lowerDesired(result.Desired)
	}
	ret := alloc(48, 8)
	if err != nil {
		put8(ret, 1)
		e := reconcileErrorOf(err)
		put8(ret+8, uint8(e.tag))
		if e.tag == requeueAfterTag {
			put64(ret+16, e.afterMs)
			storeString(ret+24, e.message)
		} else {
			storeString(ret+16, e.message)
		}
		return ret
	}
	if desired != nil {
		put8(ret+8, 1)
		base := alloc(uint32(len(desired.children))*8, 4)
		for i, child := range desired.children {
			p, n := lower(child)
			put32(base+uint32(i)*8, p)
			put32(base+uint32(i)*8+4, n)
		}
		put32(ret+12, base)
		put32(ret+16, uint32(len(desired.children)))
		if desired.status != nil {
			put8(ret+20, 1)
			p, n := lower(desired.status)
			put32(ret+24, p)
			put32(ret+28, n)
		}
	}
	if ms := millis(result.RequeueAfter); ms > 0 {
		put8(ret+32, 1)
		put64(ret+40, ms)
	}
	return ret
}

// loweredDesired is a Desired as JSON: each child's, and the status's (nil: none).
type loweredDesired struct {
	children [][]byte
	status   []byte
}

// lowerDesired marshals d; a child or status that does not marshal fails the reconcile.
func lowerDesired(d *Desired) (*loweredDesired, error) {
	out := &loweredDesired{}
	for _, child := range d.Children {
		b, err := json.Marshal(child)
		if err != nil {
			return nil, fmt.Errorf("a desired child: %w", err)
		}
		out.children = append(out.children, b)
	}
	if d.Status != nil {
		b, err := json.Marshal(d.Status)
		if err != nil {
			return nil, fmt.Errorf("the desired status: %w", err)
		}
		out.status = b
	}
	return out, nil
}

// exportMap lowers result<list<object-key>, error> (16 bytes): the tag at 0; the list at 4, or
// the error's tag at 4 and its string at 8.
//
//go:wasmexport map
func exportMap(gp, gn, vp, vn, kp, kn, op, on uint32) uint32 {
	defer resetReceive()
	pinned = nil // the previous call's results, which the host has read
	keys, err := callMap(func() ([]Key, error) {
		mapper := mapperOf(registered)
		if mapper == nil {
			return nil, nil
		}
		var object Unstructured
		if err := json.Unmarshal(mem(op, on), &object); err != nil {
			return nil, err
		}
		return mapper(liftGvk(gp, gn, vp, vn, kp, kn), object)
	})
	ret := alloc(16, 4)
	if err != nil {
		put8(ret, 1)
		tag, message := hostErrorOf(err)
		put8(ret+4, tag)
		if tag != 0 {
			storeString(ret+8, message)
		}
		return ret
	}
	base := alloc(uint32(len(keys))*20, 4)
	for i, k := range keys {
		at := base + uint32(i)*20
		storeOption(at, k.Namespace)
		storeString(at+12, k.Name)
	}
	put32(ret+4, base)
	put32(ret+8, uint32(len(keys)))
	return ret
}
