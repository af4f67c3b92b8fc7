// Package raylet is the per-node daemon that runs subtasks. A raylet
// registers with the head leader, pulls subtasks with credits (its free
// slots plus a small prefetch), runs their fused chunk kernels on a pool of
// slots, writes exported outputs straight into its object store, and reports
// completions in batches. Inputs held by other raylets are fetched over bulk
// streams from those raylets into the local store. It also serves its
// objects to peers and drivers.
//
// A raylet keeps no durable state besides what its store spills; after a
// restart it registers as new.
package raylet
