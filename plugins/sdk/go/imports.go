//go:build wasip1

package kubewasm

// The world's imports as core functions with flattened Canonical ABI parameters; results that
// do not fit one value are written to a return area whose address is the last parameter.

//go:wasmimport kubewasm:controller/cache@0.1.0 get
func hostCacheGet(gp, gn, vp, vn, kp, kn, nsSome, nsp, nsn, np, nn, ret uint32)

//go:wasmimport kubewasm:controller/cache@0.1.0 list
func hostCacheList(gp, gn, vp, vn, kp, kn, nsSome, nsp, nsn, selSome, selp, seln, ret uint32)

//go:wasmimport kubewasm:controller/cache@0.1.0 by-index
func hostCacheByIndex(gp, gn, vp, vn, kp, kn, ip, in, vap, van, ret uint32)

//go:wasmimport kubewasm:controller/client@0.1.0 apply
func hostApply(op, on, force, ret uint32)

//go:wasmimport kubewasm:controller/client@0.1.0 apply-status
func hostApplyStatus(op, on, ret uint32)

//go:wasmimport kubewasm:controller/client@0.1.0 create
func hostCreate(op, on, ret uint32)

//go:wasmimport kubewasm:controller/client@0.1.0 patch
func hostPatch(gp, gn, vp, vn, kp, kn, nsSome, nsp, nsn, np, nn, patchType, bp, bn, ret uint32)

//go:wasmimport kubewasm:controller/client@0.1.0 delete
func hostDelete(gp, gn, vp, vn, kp, kn, nsSome, nsp, nsn, np, nn, ret uint32)

//go:wasmimport kubewasm:controller/events@0.1.0 publish
func hostPublish(gp, gn, vp, vn, kp, kn, nsSome, nsp, nsn, np, nn, eventType, rp, rn, notep, noten, ret uint32)

//go:wasmimport kubewasm:controller/log@0.1.0 log
func hostLog(level, mp, mn uint32)

//go:wasmimport kubewasm:controller/config@0.1.0 settings
func hostSettings(ret uint32)

// retArea is a fresh return area big enough for every import's result (16 bytes, align 4).
// It also frees the receive arena for the call's results (arena.go): every import with a
// result calls it first.
func retArea() uint32 {
	resetReceive()
	return alloc(16, 8)
}

func cacheGet(kind Kind, namespace *string, name string) ([]byte, bool, error) {
	ret := retArea()
	gp, gn, vp, vn, kp, kn := lowerGvk(kind)
	s, p, n := lowerOption(namespace)
	np, nn := lowerString(name)
	hostCacheGet(gp, gn, vp, vn, kp, kn, s, p, n, np, nn, ret)
	if u8(ret) != 0 {
		return nil, false, liftError(ret + 4)
	}
	if u8(ret+4) == 0 {
		return nil, false, nil
	}
	return liftBytes(u32(ret+8), u32(ret+12)), true, nil
}

func cacheList(kind Kind, namespace, selector *string) ([][]byte, error) {
	ret := retArea()
	gp, gn, vp, vn, kp, kn := lowerGvk(kind)
	s, p, n := lowerOption(namespace)
	ls, lp, ln := lowerOption(selector)
	hostCacheList(gp, gn, vp, vn, kp, kn, s, p, n, ls, lp, ln, ret)
	return liftResultList(ret)
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
	f := uint32(0)
	if force {
		f = 1
	}
	hostApply(p, n, f, ret)
	return liftResultBytes(ret)
}

func clientApplyStatus(object []byte) ([]byte, error) {
	ret := retArea()
	p, n := lower(object)
	hostApplyStatus(p, n, ret)
	return liftResultBytes(ret)
}

func clientCreate(object []byte) ([]byte, error) {
	ret := retArea()
	p, n := lower(object)
	hostCreate(p, n, ret)
	return liftResultBytes(ret)
}

func clientPatch(kind Kind, namespace *string, name string, patchType PatchType, body []byte) ([]byte, error) {
	ret := retArea()
	gp, gn, vp, vn, kp, kn := lowerGvk(kind)
	s, p, n := lowerOption(namespace)
	np, nn := lowerString(name)
	bp, bn := lower(body)
	hostPatch(gp, gn, vp, vn, kp, kn, s, p, n, np, nn, uint32(patchType), bp, bn, ret)
	return liftResultBytes(ret)
}

func clientDelete(kind Kind, namespace *string, name string) error {
	ret := retArea()
	gp, gn, vp, vn, kp, kn := lowerGvk(kind)
	s, p, n := lowerOption(namespace)
	np, nn := lowerString(name)
	hostDelete(gp, gn, vp, vn, kp, kn, s, p, n, np, nn, ret)
	return liftResultUnit(ret)
}

func eventsPublish(kind Kind, namespace *string, name string, warning bool, reason, note string) error {
	ret := retArea()
	gp, gn, vp, vn, kp, kn := lowerGvk(kind)
	s, p, n := lowerOption(namespace)
	np, nn := lowerString(name)
	rp, rn := lowerString(reason)
	notep, noten := lowerString(note)
	eventType := uint32(0)
	if warning {
		eventType = 1
	}
	hostPublish(gp, gn, vp, vn, kp, kn, s, p, n, np, nn, eventType, rp, rn, notep, noten, ret)
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
