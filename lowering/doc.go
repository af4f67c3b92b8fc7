// Package lowering turns a tileable graph into a static DAG of subtasks:
// it tiles every tileable into chunks (asking each op's Tiler), fuses chains
// of chunks, groups them into subtasks with fetch edges between them, gives
// each subtask its priority, and assigns the initial subtasks to raylets.
//
// Lowering is a pure function of its inputs: the same graph, options, raylet
// list and committed IDs always give the same subtask graph. That is what
// lets a new head leader lower a job again after a failover. Lowering does no
// I/O; the one outside effect, committing a stage ID and a subtask index
// range, goes through the Allocate callback the caller passes in.
//
// It does not decide where non-initial subtasks run or in which order READY
// subtasks are dispatched at run time; that is runtime/head.
package lowering
