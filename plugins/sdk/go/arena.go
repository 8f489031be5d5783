//go:build wasip1

package kubewasm

import "unsafe"

// Two kinds of memory must not come from Go's allocator, and cannot come from pages grown
// behind Go's back either: Go's wasm runtime (runtime.sbrk) treats every byte of linear memory
// above its data as its own heap and overwrites such pages.
//
//   - The WASI preview1 adapter's state and stack (64 KiB each). The adapter asks for them
//     while Go's runtime is on its system stack, where no Go function may run.
//   - What the host writes into the plugin: results of host calls and arguments of exports.
//     The host allocates them with `cabi_realloc` in the middle of a call, where Go's
//     allocator may not run either: growing the heap reads the clock, an import, and the
//     component model forbids calling out of the instance from inside cabi_realloc.
//
// So both live in Go's data, which the heap never touches: two arrays that open with a marker
// and their size, so the linker keeps them in data segments (their zeros cost no file size) and
// tools/go-component finds their addresses. That tool adds `cabi_realloc_adapter` and
// `cabi_realloc`, written in plain wasm, bump-allocating from them.

// adapterArenaBytes is the adapter's state and stack (a page each) plus alignment slack.
const adapterArenaBytes = 2*65536 + 256

// adapterArena opens with tools/go-component's ADAPTER marker, "kubewasm go adapter arena v1
// ###" as little-endian words, then its size. Nothing in Go reads or writes it.
var adapterArena = [adapterArenaBytes / 8]uint64{
	0x6d7361776562756b, 0x70616461206f6720, 0x6e65726120726574, 0x2323232031762061,
	adapterArenaBytes,
}

// ReceiveBytes is the most the host can write into a Go plugin at once: the result of one
// host call (an object, a list of objects, an error) or the arguments of one call into the
// plugin. More traps (cabi_realloc: unreachable).
const ReceiveBytes = 8 << 20

// receiveArena opens with the RECEIVE marker, "kubewasm go receive arena v1 ###", then its
// size; word 5 is the next free address (0: the start), written by cabi_realloc and reset
// here. What the host writes stays valid until the next reset; the SDK copies it out first.
var receiveArena = [ReceiveBytes / 8]uint64{
	0x6d7361776562756b, 0x65636572206f6720, 0x6e65726120657669, 0x2323232031762061,
	ReceiveBytes,
}

// resetReceive frees everything the host wrote: call it before each host call with results,
// and at the end of each export.
func resetReceive() { receiveArena[5] = 0 }

// arenaAddrs keeps the arrays linked in: exportDescribe reads it.
var arenaAddrs = [2]uintptr{uintptr(unsafe.Pointer(&adapterArena)), uintptr(unsafe.Pointer(&receiveArena))}
