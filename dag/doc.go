// Package dag is the vocabulary every other phobos package shares: the
// 12-byte subtask IDs of Mars MEP 0002 and the object IDs built on them, op IDs
// and the op registry, the three graph types (tileable, chunk, subtask) stored
// in dense slices, data types and object metadata, and the error kinds that
// survive a trip over the wire. It also holds the bounds every array obeys
// (MaxElements, MaxDims) with saturating arithmetic for sizes users chose,
// the decoder that bounds a submitted graph by its frame
// (TileableGraph.UnmarshalCBOR), and the Estimator capability through which
// ops bound their tiling before it happens.
//
// dag does no I/O, but for HugePages, which reads the system's transparent
// huge page setting once and advises the kernel on tables it is about to
// fill; it starts no goroutines, but for GroupSubtasksThen's, which links
// successors beside numbering outputs. It does not tile, fuse or schedule
// (that is package lowering and runtime/head); it only defines what those
// passes read and write.
package dag
