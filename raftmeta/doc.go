// Package raftmeta owns the head's replicated metadata: the Raft state
// machine (FSM), the Raft node that runs it with its on-disk stores, and
// changes of the voter set.
//
// What lives in Raft (replicated, durable, survives a leader change):
//   - the task ID sequence (from 1 to dag.MaxTaskID), each task's stage ID
//     sequence (1 to dag.MaxStageID) and each stage's subtask index sequence
//     (1 to dag.MaxSubtaskIndex, handed out as ranges). A value is never
//     handed out twice, even across failovers; running past a limit is a
//     dag.KindResourceExhausted error, never a wrap;
//   - job records: the opaque tileable graph and options, the status
//     (SUBMITTED → RUNNING → SUCCEEDED | FAILED | CANCELLED), the error, the
//     result object IDs (as runs of consecutive subtasks, dag.ObjectRun, or
//     as a list in records written by earlier heads; Job.ResultIDs reads
//     either), and the committed stages with their index ranges;
//   - raylet membership: each raylet's ID, address, slots and store size;
//   - the dedupe table: the results of the last Config.DedupeWindow request
//     IDs, so a retry after an unknown outcome is answered, not re-applied.
//     A retry older than the window is applied again.
//
// What does not live in Raft (soft state of the leader's scheduler in
// runtime/head, rebuilt after a failover by lowering again from the job
// records and asking raylets what they hold): raylet heartbeats and
// liveness, free slots and queue lengths, subtask states, ready queues, the
// object directory, lineage and reference counts.
//
// Commands are CBOR (internal/codec, keyasint structs, deterministic
// encoding) in an envelope {Type, RequestID, Body}. Apply reads no clock:
// times come from the commands, must lie in [1970, 2100) and are kept to
// the microsecond in UTC, so every replica holds the same instant. Apply never panics; a malformed, unknown or
// invalid command gets an error Result (kinds InvalidArgument, NotFound,
// ResourceExhausted, Cancelled) and leaves the state unchanged.
//
// On disk (disk.go) a head keeps DataDir/raft.db (raft-boltdb: the log
// and the stable store) and DataDir/snapshots (raft's file snapshot
// store). Both hold users' job records, so the data dir is 0700 and every
// file in it 0600, whatever the umask; Open tightens a data dir left
// looser by an older release. raft.db is read page by page at Open, so a
// garbled file is an error naming it and how to recover rather than a
// panic inside bbolt; a write that finds the file system full fails with
// dag.KindResourceExhausted naming the data dir (Node.DiskFull), and log
// writes then fail without touching the disk until it has room again.
//
// Config.Storage replaces the data dir with other stores (NewInmemStorage:
// hashicorp/raft's InmemStore and InmemSnapshotStore) and Config.Transport
// replaces the network transport (raft.InmemTransport), so that tests run
// whole Raft clusters without files or sockets; a Storage outlives its
// Node, so a Node reopened on it restarts as a head whose disk survived.
//
// Node.Backup writes the state as a snapshot and Node.Restore installs one
// on every head (disaster recovery; the snapshot is checked in full first).
//
// raftmeta does not own networking between heads (Open takes a
// raft.StreamLayer, or Config.Transport; NewStreamLayer adapts the head's
// authenticated listener and dialer) nor request forwarding: a write on a follower returns a
// *NotLeaderError naming the leader, and the head forwards over its own RPC
// layer.
package raftmeta
