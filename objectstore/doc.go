// Package objectstore is one raylet's object store: a file in a RAM-backed
// directory (/dev/shm by default), reserved whole with fallocate and mapped
// shared into the process, the allocator that places objects in it, and the
// lifecycle of every object.
//
// # Lifecycle
//
//	Create ──► (creator writes its view) ──► Seal ──► Get/Release … ──► Delete
//	   └──────────────► Abort
//
// Create reserves space and returns a writable view; the object is invisible
// until Seal makes it immutable and readable. A writer that fails calls
// Abort. Get pins a sealed object and returns a read-only view; Release
// unpins it. Delete frees the space at once, or, if readers pin the object,
// hides it at once and frees it at the last Release.
//
// # Who owns a view, and until when
//
//   - The view returned by Create belongs to its creator, who may write it
//     until Seal (then it must stop writing) or Abort (then it must stop
//     touching it: the space may be reused at once).
//   - The Data and Meta of an Object returned by Get are read-only and valid
//     until the matching Release; each Get takes one pin, each Release drops
//     one. Reading after Release may see another object's bytes.
//   - Delete of a pinned object defers the free, so readers are never cut
//     off; until the last pin goes, the id cannot be created again.
//   - Close unmaps the arena: every view becomes invalid and touching one
//     faults. Stop readers and writers before Close.
//
// Sealed objects are immutable by contract only: the store does not
// mprotect individual objects (they are 64-byte aligned, not page aligned).
//
// # What it owns and what it does not
//
// It owns the arena file (created with O_EXCL as
// <Dir>/phobos-<Name>-<pid>.arena, removed by Close; files of the same Name
// left by dead processes are removed by Open), the free-space map, and a
// table of per-object state (offset, size, sealed, pins, deleted, last use).
// Everything is in one process and one mutex; no goroutines are started.
//
// It does not decide what to free (the head does, through the raylet), does
// not talk to peers, and does not yet spill to disk, wait for space, or
// serve readers in other processes. Those come later and are meant to be
// added, not rewritten in: each object keeps its arena (offset, size), its
// pin count and a last-use clock that a spill step can order by, the
// allocator answers "what is the largest free block" for a wait-for-space
// step, and the arena file stays open so its descriptor can be passed on.
//
// # Errors
//
// Every error wraps one of the package sentinels (ErrNotFound, ErrFull, …)
// and carries a dag kind, so callers classify with errors.Is on either, and
// the kind survives the wire.
package objectstore
