//go:build wasip1

package kubewasm

// The world's imports as core functions with flattened Canonical ABI parameters; results that
// do not fit one value are written to a return area whose address is the last parameter. A
// function whose parameters flatten to more than 16 values (cache.list, client.patch,
// patch-status, delete) takes them in memory instead: one address of the parameters laid out
// as a record, then the return area.

//go:wasmimport kubewasm:controller/cache@0.3.0 get
func hostCacheGet(gp, gn, vp, vn, kp, kn, nsSome, nsp, nsn, np, nn, ret uint32)

//go:wasmimport kubewasm:controller/cache@0.3.0 list
func hostCacheList(args, ret uint32)

//go:wasmimport kubewasm:controller/cache@0.3.0 by-index
func hostCacheByIndex(gp, gn, vp, vn, kp, kn, ip, in, vap, van, ret uint32)

//go:wasmimport kubewasm:controller/client@0.3.0 apply
func hostApply(op, on, force, ret uint32)

//go:wasmimport kubewasm:controller/client@0.3.0 apply-status
func hostApplyStatus(op, on, force, ret uint32)

//go:wasmimport kubewasm:controller/client@0.3.0 create
func hostCreate(op, on, ret uint32)

//go:wasmimport kubewasm:controller/client@0.3.0 patch
func hostPatch(args, ret uint32)

//go:wasmimport kubewasm:controller/client@0.3.0 patch-status
func hostPatchStatus(args, ret uint32)

//go:wasmimport kubewasm:controller/client@0.3.0 delete
func hostDelete(args, ret uint32)

//go:wasmimport kubewasm:controller/client@0.3.0 get
func hostClientGet(gp, gn, vp, vn, kp, kn, nsSome, nsp, nsn, np, nn, ret uint32)

//go:wasmimport kubewasm:controller/events@0.3.0 publish
func hostPublish(gp, gn, vp, vn, kp, kn, nsSome, nsp, nsn, np, nn, eventType, rp, rn, notep, noten, ret uint32)

//go:wasmimport kubewasm:controller/log@0.3.0 log
func hostLog(level, mp, mn uint32)

//go:wasmimport kubewasm:controller/config@0.3.0 settings
func hostSettings(ret uint32)

// retArea is a fresh return area big enough for every import's result (24 bytes, align 4:
// result<object-list, error>). It also frees the receive arena for the call's results
// (arena.go): every import with a result calls it first.
func retArea() uint32 {
	resetReceive()
	return alloc(24, 8)
}

func boolFlat(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func cacheGet(kind Kind, namespace *string, name string) ([]byte, bool, error) {
	ret := retArea()
	gp, gn, vp, vn, kp, kn := lowerGvk(kind)
	s, p, n := lowerOption(namespace)
	np, nn := lowerString(name)
	hostCacheGet(gp, gn, vp, vn, kp, kn, s, p, n, np, nn, ret)
	return liftResultOptionBytes(ret)
}

// cacheList lays out (gvk, list-options): gvk at 0, then namespace, label-selector and
// field-selector (option<string>, 12 bytes each) at 24, 36, 48, limit (option<u32>) at 60 and
// continue-token at 68; 80 bytes. The result is object-list { items, continue-token } at +4.
func cacheList(kind Kind, o ListOptions) ([][]byte, string, error) {
	ret := retArea()
	args := alloc(80, 4)
	storeGvk(args, kind)
	storeOption(args+24, o.Namespace)
	storeOption(args+36, o.LabelSelector)
	storeOption(args+48, o.FieldSelector)
	if o.Limit > 0 {
		put8(args+60, 1)
		put32(args+64, o.Limit)
	}
	storeOption(args+68, o.Continue)
	hostCacheList(args, ret)
	if u8(ret) != 0 {
		return nil, "", liftError(ret + 4)
	}
	return liftByteLists(u32(ret+4), u32(ret+8)), liftOptionString(ret + 12), nil
}

func cacheByIndex(kind Kind, index, value string) ([][]byte, error) {
	ret := retArea()
	gp, gn, vp, vn, kp, kn := lowerGvk(kind)
	ip, in := lowerString(index)
	vap, van := lowerString(value)
	hostCacheByIndex(gp, gn, vp, vn, kp, kn, ip, in, vap, van, ret)
	return liftResultList(ret)
}

func clientApply(object []byte, force bool) ([]byte, error) {
	ret := retArea()
	p, n := lower(object)
	hostApply(p, n, boolFlat(force), ret)
	return liftResultBytes(ret)
}

func clientApplyStatus(object []byte, force bool) ([]byte, error) {
	ret := retArea()
	p, n := lower(object)
	hostApplyStatus(p, n, boolFlat(force), ret)
	return liftResultBytes(ret)
}

func clientCreate(object []byte) ([]byte, error) {
	ret := retArea()
	p, n := lower(object)
	hostCreate(p, n, ret)
	return liftResultBytes(ret)
}

// storeTarget writes (gvk, namespace: option<string>, name) at args: 44 bytes.
func storeTarget(args uint32, kind Kind, namespace, name string) {
	storeGvk(args, kind)
	storeOption(args+24, namespace)
	storeString(args+36, name)
}

// storePreconditions writes preconditions { resource-version, uid } (24 bytes) at addr.
func storePreconditions(addr uint32, p Preconditions) {
	storeOption(addr, p.ResourceVersion)
	storeOption(addr+12, p.UID)
}

// patchArgs lays out (gvk, namespace, name, patch-type, body, preconditions): the target at 0,
// patch-type (u8) at 44, body at 48, preconditions at 56; 80 bytes.
func patchArgs(kind Kind, namespace, name string, patchType PatchType, body []byte, pre Preconditions) uint32 {
	args := alloc(80, 4)
	storeTarget(args, kind, namespace, name)
	put8(args+44, uint8(patchType))
	p, n := lower(body)
	put32(args+48, p)
	put32(args+52, n)
	storePreconditions(args+56, pre)
	return args
}

func clientPatch(kind Kind, namespace, name string, patchType PatchType, body []byte, pre Preconditions) ([]byte, error) {
	ret := retArea()
	hostPatch(patchArgs(kind, namespace, name, patchType, body, pre), ret)
	return liftResultBytes(ret)
}

func clientPatchStatus(kind Kind, namespace, name string, patchType PatchType, body []byte, pre Preconditions) ([]byte, error) {
	ret := retArea()
	hostPatchStatus(patchArgs(kind, namespace, name, patchType, body, pre), ret)
	return liftResultBytes(ret)
}

// clientDelete lays out (gvk, namespace, name, delete-options): the target at 0, preconditions
// at 44, propagation-policy (option<enum>: tag, then the case) at 68; 72 bytes.
func clientDelete(kind Kind, namespace, name string, o deleteOptions) error {
	ret := retArea()
	args := alloc(72, 4)
	storeTarget(args, kind, namespace, name)
	storePreconditions(args+44, o.preconditions)
	if o.propagation != DefaultPropagation {
		put8(args+68, 1)
		put8(args+69, uint8(o.propagation)-1)
	}
	hostDelete(args, ret)
	return liftResultUnit(ret)
}

func clientGet(kind Kind, namespace *string, name string) ([]byte, bool, error) {
	ret := retArea()
	gp, gn, vp, vn, kp, kn := lowerGvk(kind)
	s, p, n := lowerOption(namespace)
	np, nn := lowerString(name)
	hostClientGet(gp, gn, vp, vn, kp, kn, s, p, n, np, nn, ret)
	return liftResultOptionBytes(ret)
}

func eventsPublish(kind Kind, namespace *string, name string, warning bool, reason, note string) error {
	ret := retArea()
	gp, gn, vp, vn, kp, kn := lowerGvk(kind)
	s, p, n := lowerOption(namespace)
	np, nn := lowerString(name)
	rp, rn := lowerString(reason)
	notep, noten := lowerString(note)
	hostPublish(gp, gn, vp, vn, kp, kn, s, p, n, np, nn, boolFlat(warning), rp, rn, notep, noten, ret)
	return liftResultUnit(ret)
}

func logLine(level uint32, message string) {
	p, n := lowerString(message)
	hostLog(level, p, n)
}

func configSettings() []byte {
	ret := retArea()
	hostSettings(ret)
	return liftBytes(u32(ret), u32(ret+4))
}
