//go:build wasip1

package kubewasm

// The Canonical ABI of world kubewasm:controller/controller@0.3.0, written by hand for Go's
// wasip1 port: wit-bindgen-go's generated code needs a 32-bit GOARCH (Go's wasm port has 64-bit
// pointers), so this file lowers and lifts the world's few types itself. Every pointer at the
// boundary is a 32-bit address in linear memory. Memory the SDK hands to the host stays
// referenced by `pinned` until the export returns; what the host writes back lands in the
// receive arena (arena.go) and is copied out before the next host call.

import (
	"encoding/binary"
	"unsafe"
)

var pinned [][]byte

// alloc returns zeroed, pinned memory of n bytes aligned to align.
func alloc(n, align uint32) uint32 {
	if align == 0 {
		align = 1
	}
	buf := make([]byte, n+align)
	pinned = append(pinned, buf)
	addr := uint32(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	return (addr + align - 1) &^ (align - 1)
}

// mem is the n bytes of linear memory at addr.
func mem(addr, n uint32) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(uintptr(addr))), n)
}

func u8(addr uint32) uint8      { return mem(addr, 1)[0] }
func u32(addr uint32) uint32    { return binary.LittleEndian.Uint32(mem(addr, 4)) }
func put8(addr uint32, v uint8) { mem(addr, 1)[0] = v }
func put32(addr, v uint32)      { binary.LittleEndian.PutUint32(mem(addr, 4), v) }
func put64(addr uint32, v uint64) {
	binary.LittleEndian.PutUint64(mem(addr, 8), v)
}

// lower copies b into pinned memory; returns its address and length.
func lower(b []byte) (uint32, uint32) {
	if len(b) == 0 {
		return 0, 0
	}
	addr := alloc(uint32(len(b)), 1)
	copy(mem(addr, uint32(len(b))), b)
	return addr, uint32(len(b))
}

func lowerString(s string) (uint32, uint32) { return lower([]byte(s)) }

// storeOption writes option<string> (tag, then the string at +4) at addr; "" is none.
func storeOption(addr uint32, s string) {
	if s != "" {
		put8(addr, 1)
		storeString(addr+4, s)
	}
}

// lowerOption lowers option<string> to its three flat values.
func lowerOption(s *string) (uint32, uint32, uint32) {
	if s == nil {
		return 0, 0, 0
	}
	p, n := lowerString(*s)
	return 1, p, n
}

// liftBytes copies a list<u8> out of linear memory.
func liftBytes(addr, n uint32) []byte { return append([]byte(nil), mem(addr, n)...) }

func liftString(addr, n uint32) string { return string(mem(addr, n)) }

// storeString writes a string's (ptr, len) at addr.
func storeString(addr uint32, s string) {
	p, n := lowerString(s)
	put32(addr, p)
	put32(addr+4, n)
}

// gvkSize is the size of a lowered gvk record: three strings.
const gvkSize = 24

func storeGvk(addr uint32, k Kind) {
	g, v := k.groupVersion()
	storeString(addr, g)
	storeString(addr+8, v)
	storeString(addr+16, k.Kind)
}

func lowerGvk(k Kind) (uint32, uint32, uint32, uint32, uint32, uint32) {
	g, v := k.groupVersion()
	gp, gn := lowerString(g)
	vp, vn := lowerString(v)
	kp, kn := lowerString(k.Kind)
	return gp, gn, vp, vn, kp, kn
}

func liftGvk(gp, gn, vp, vn, kp, kn uint32) Kind {
	return kindOf(liftString(gp, gn), liftString(vp, vn), liftString(kp, kn))
}

// storeGvkList writes list<gvk> (ptr, len) at addr.
func storeGvkList(addr uint32, kinds []Kind) {
	base := alloc(uint32(len(kinds))*gvkSize, 4)
	for i, k := range kinds {
		storeGvk(base+uint32(i)*gvkSize, k)
	}
	put32(addr, base)
	put32(addr+4, uint32(len(kinds)))
}

// liftError reads a `types.error` variant at addr.
func liftError(addr uint32) *HostError {
	tag := u8(addr)
	e := &HostError{Reason: errorNames[tag]}
	if tag != 0 {
		e.Message = liftString(u32(addr+4), u32(addr+8))
	}
	return e
}

// liftResultBytes reads result<list<u8>, error> from a return area.
func liftResultBytes(ret uint32) ([]byte, error) {
	if u8(ret) != 0 {
		return nil, liftError(ret + 4)
	}
	return liftBytes(u32(ret+4), u32(ret+8)), nil
}

// liftOptionString reads option<string> at addr; none is "".
func liftOptionString(addr uint32) string {
	if u8(addr) == 0 {
		return ""
	}
	return liftString(u32(addr+4), u32(addr+8))
}

// liftByteLists copies a list<list<u8>> (ptr, len) out of linear memory.
func liftByteLists(base, n uint32) [][]byte {
	out := make([][]byte, n)
	for i := range n {
		out[i] = liftBytes(u32(base+8*i), u32(base+8*i+4))
	}
	return out
}

// liftResultOptionBytes reads result<option<list<u8>>, error> from a return area.
func liftResultOptionBytes(ret uint32) ([]byte, bool, error) {
	if u8(ret) != 0 {
		return nil, false, liftError(ret + 4)
	}
	if u8(ret+4) == 0 {
		return nil, false, nil
	}
	return liftBytes(u32(ret+8), u32(ret+12)), true, nil
}

// liftResultList reads result<list<list<u8>>, error> from a return area.
func liftResultList(ret uint32) ([][]byte, error) {
	if u8(ret) != 0 {
		return nil, liftError(ret + 4)
	}
	return liftByteLists(u32(ret+4), u32(ret+8)), nil
}

// liftResultUnit reads result<_, error> from a return area.
func liftResultUnit(ret uint32) error {
	if u8(ret) != 0 {
		return liftError(ret + 4)
	}
	return nil
}
