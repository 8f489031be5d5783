//go:build wasip1

package kubewasm

import (
	"context"
	"encoding/json"
	"fmt"
)

// The world's exports. Each lowers its result into a pinned return area and returns its address.

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
	ret := alloc(84, 4)
	storeGvk(ret, r.forKind)
	if r.selector != "" {
		put8(ret+24, 1)
		storeString(ret+28, r.selector)
	}
	storeGvkList(ret+36, r.owns)
	watches := alloc(uint32(len(r.watches))*36, 4)
	for i, w := range r.watches {
		at := watches + uint32(i)*36
		storeGvk(at, w.kind)
		if w.selector != "" {
			put8(at+24, 1)
			storeString(at+28, w.selector)
		}
	}
	put32(ret+44, watches)
	put32(ret+48, uint32(len(r.watches)))
	storeGvkList(ret+52, r.reads)
	storeGvkList(ret+60, r.writes)
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
	put32(ret+68, indexes)
	put32(ret+72, uint32(len(r.indexes)))
	if r.maxConcurrent > 0 {
		put8(ret+76, 1)
		put32(ret+80, r.maxConcurrent)
	}
	return ret
}

//go:wasmexport reconcile
func exportReconcile(gp, gn, vp, vn, kp, kn, nsSome, nsp, nsn, np, nn, attempt uint32) uint32 {
	defer resetReceive()
	pinned = nil // the previous call's results, which the host has read
	req := Request{Kind: liftGvk(gp, gn, vp, vn, kp, kn), Name: liftString(np, nn), Attempt: attempt}
	if nsSome != 0 {
		req.Namespace = liftString(nsp, nsn)
	}
	result, err := callReconcile(req)
	ret := alloc(24, 8)
	if err != nil {
		put8(ret, 1)
		storeString(ret+8, err.Error())
		return ret
	}
	if result.RequeueAfter > 0 {
		put8(ret+8, 1)
		put64(ret+16, uint64(result.RequeueAfter.Milliseconds()))
	}
	return ret
}

// callReconcile turns a panic into the reconcile's error, as the other SDKs do with exceptions.
func callReconcile(req Request) (result Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return registered.Reconcile(context.Background(), req)
}

//go:wasmexport map
func exportMap(gp, gn, vp, vn, kp, kn, op, on uint32) uint32 {
	defer resetReceive()
	pinned = nil // the previous call's results, which the host has read
	var keys []Key
	if mapper, ok := registered.(Mapper); ok {
		var object Unstructured
		if json.Unmarshal(mem(op, on), &object) == nil {
			keys = mapper.Map(liftGvk(gp, gn, vp, vn, kp, kn), object)
		}
	}
	ret := alloc(8, 4)
	base := alloc(uint32(len(keys))*20, 4)
	for i, k := range keys {
		at := base + uint32(i)*20
		if k.Namespace != "" {
			put8(at, 1)
			storeString(at+4, k.Namespace)
		}
		storeString(at+12, k.Name)
	}
	put32(ret, base)
	put32(ret+4, uint32(len(keys)))
	return ret
}
