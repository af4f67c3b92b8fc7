package dag

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Priority orders READY subtasks (the seeds' operand selection policy):
// deeper first; then those demanded by deeper subtasks; then fewer
// successors. The last tie-break, newest enqueued first, is the scheduler's.
type Priority struct {
	Depth       int32 // longest path from a source subtask
	DemandDepth int32 // the deepest successor that waits on this subtask
	Succs       int32 // number of successor subtasks
}

// Before reports whether p runs before q.
func (p Priority) Before(q Priority) bool {
	if p.Depth != q.Depth {
		return p.Depth > q.Depth
	}
	if p.DemandDepth != q.DemandDepth {
		return p.DemandDepth > q.DemandDepth
	}
	return p.Succs < q.Succs
}

// Subtask is one node of a subtask graph: a group of fused chunks that runs
// as one unit on one raylet. Its chunks, exported outputs, predecessors and
// successors live in the graph's tables; read them with the accessors.
type Subtask struct {
	Priority Priority
	// Raylet is the index of the raylet initial assignment chose, or -1 for
	// subtasks placed at run time.
	Raylet int32

	// The subtask's chunks (in execution order) start at c0 of the
	// graph's chunk table and its exported chunks (outputs, in output-index
	// order) at o0 of its output table; each ends where the next subtask's
	// begins (the last at the table's end): 8 bytes a subtask fewer than
	// storing the lengths.
	c0, o0 uint32
}

// SubtaskGraph is one stage of a job lowered into subtasks. Subtask i has
// the ID PackSubtaskID(Task, Stage, Base+i). Inputs a subtask needs from
// other subtasks are its predecessors' outputs ("fetch edges").
type SubtaskGraph struct {
	Task   TaskID
	Stage  StageID
	Base   uint64 // the first subtask index of the stage's committed range
	Chunks *ChunkGraph

	Subtasks []Subtask
	Preds    CSR // subtask → subtasks whose outputs it reads
	Succs    CSR // subtask → subtasks that read its outputs

	// Owner maps each chunk node to the subtask that computes it (-1 for
	// chunks of earlier stages). OutIndex maps each chunk node to its output
	// index in its owner (-1 when it does not leave the subtask).
	Owner    []int32
	OutIndex []int32

	chunks  []int32
	outputs []int32
}

// NewSubtaskGraph returns an empty graph over chunks with room for n subtasks.
func NewSubtaskGraph(chunks *ChunkGraph, n int) *SubtaskGraph {
	return &SubtaskGraph{
		Chunks:   chunks,
		Subtasks: make([]Subtask, 0, n),
		chunks:   make([]int32, 0, chunks.Len()),
		outputs:  make([]int32, 0, n), // most subtasks export one chunk
	}
}

// AddSubtask appends a subtask made of the given chunks (in execution
// order) exporting outputs, and returns its index.
func (g *SubtaskGraph) AddSubtask(chunks, outputs []int32) int32 {
	g.Subtasks = append(g.Subtasks, Subtask{
		Raylet: -1,
		c0:     uint32(len(g.chunks)),
		o0:     uint32(len(g.outputs)),
	})
	g.chunks = append(g.chunks, chunks...)
	g.outputs = append(g.outputs, outputs...)
	return int32(len(g.Subtasks) - 1)
}

// Len returns the number of subtasks.
func (g *SubtaskGraph) Len() int { return len(g.Subtasks) }

// ID returns subtask i's 12-byte ID.
func (g *SubtaskGraph) ID(i int32) SubtaskID { return PackSubtaskID(g.Task, g.Stage, g.Base+uint64(i)) }

// ChunksOf returns subtask i's chunks in execution order (aliases the graph).
func (g *SubtaskGraph) ChunksOf(i int32) []int32 {
	c0, c1 := g.Subtasks[i].c0, uint32(len(g.chunks))
	if int(i)+1 < len(g.Subtasks) {
		c1 = g.Subtasks[i+1].c0
	}
	return g.chunks[c0:c1:c1]
}

// OutputsOf returns the chunks subtask i exports, by output index (aliases
// the graph).
func (g *SubtaskGraph) OutputsOf(i int32) []int32 {
	o0, o1 := g.Subtasks[i].o0, uint32(len(g.outputs))
	if int(i)+1 < len(g.Subtasks) {
		o1 = g.Subtasks[i+1].o0
	}
	return g.outputs[o0:o1:o1]
}

// ObjectOf returns the object ID under which chunk c is stored, or false if
// c never leaves its subtask.
func (g *SubtaskGraph) ObjectOf(c int32) (ObjectID, bool) {
	if int(c) >= len(g.Owner) || g.Owner[c] < 0 || g.OutIndex[c] < 0 {
		return ObjectID{}, false
	}
	var o ObjectID
	ix := g.Base + uint64(g.Owner[c])
	binary.LittleEndian.PutUint32(o[0:4], uint32(g.Task))
	binary.LittleEndian.PutUint16(o[4:6], uint16(g.Stage))
	binary.LittleEndian.PutUint32(o[6:10], uint32(ix))
	binary.LittleEndian.PutUint16(o[10:12], uint16(ix>>32))
	binary.LittleEndian.PutUint32(o[12:16], uint32(g.OutIndex[c]))
	return o, true // NewObjectID(g.ID(g.Owner[c]), OutIndex[c]), written in place
}

// ObjectsOf writes into out[i] the object under which chunks[i] is stored
// (as ObjectOf, in one loop) and returns how many it wrote: fewer than
// len(chunks) when chunks[n] never leaves its subtask. out must be at
// least as long as chunks.
func (g *SubtaskGraph) ObjectsOf(chunks []int32, out []ObjectID) int {
	var head [6]byte // task and stage, the same for every object
	binary.LittleEndian.PutUint32(head[0:4], uint32(g.Task))
	binary.LittleEndian.PutUint16(head[4:6], uint16(g.Stage))
	out = out[:len(chunks)]
	for i, c := range chunks {
		if int(c) >= len(g.Owner) || g.Owner[c] < 0 || g.OutIndex[c] < 0 {
			return i
		}
		ix := g.Base + uint64(g.Owner[c])
		o := &out[i]
		copy(o[0:6], head[:])
		binary.LittleEndian.PutUint32(o[6:10], uint32(ix))
		binary.LittleEndian.PutUint16(o[10:12], uint16(ix>>32))
		binary.LittleEndian.PutUint32(o[12:16], uint32(g.OutIndex[c]))
	}
	return len(chunks)
}

// Link fills Owner, OutIndex, Preds and Succs from the subtasks' chunks and
// outputs. It fails if a chunk belongs to two subtasks, if a subtask reads a
// chunk of another subtask that is not exported, or if the subtasks form a
// cycle.
func (g *SubtaskGraph) Link() error {
	n := g.Chunks.Len()
	g.Owner = make([]int32, n)
	g.OutIndex = make([]int32, n)
	for i := range g.Owner {
		g.Owner[i] = -1
		g.OutIndex[i] = -1
	}
	for s := range g.Subtasks {
		for _, c := range g.ChunksOf(int32(s)) {
			if g.Owner[c] >= 0 {
				return fmt.Errorf("chunk %d is in subtasks %d and %d", c, g.Owner[c], s)
			}
			g.Owner[c] = int32(s)
		}
		for k, c := range g.OutputsOf(int32(s)) {
			if g.Owner[c] != int32(s) {
				return fmt.Errorf("subtask %d exports chunk %d that it does not compute", s, c)
			}
			g.OutIndex[c] = int32(k)
		}
	}
	if err := g.linkPreds(); err != nil {
		return err
	}
	return g.linkSuccs()
}

// linkPreds fills Preds from Owner and OutIndex: each subtask's distinct
// predecessors, in the order its chunks first read them.
func (g *SubtaskGraph) linkPreds() error {
	off := make([]int32, 1, len(g.Subtasks)+1)
	var dst []int32
	for s := range g.Subtasks {
		start := len(dst)
		for _, c := range g.ChunksOf(int32(s)) {
			for _, in := range g.Chunks.Inputs(c) {
				p := g.Owner[in]
				if p < 0 || p == int32(s) {
					continue
				}
				if g.OutIndex[in] < 0 {
					return fmt.Errorf("subtask %d reads chunk %d of subtask %d, which does not export it", s, in, p)
				}
				if !slices.Contains(dst[start:], p) {
					dst = append(dst, p)
				}
			}
		}
		off = append(off, int32(len(dst)))
	}
	g.Preds = CSR{Off: off, Dst: dst}
	return nil
}

// linkSuccs fills Succs from Preds and refuses a cyclic graph.
func (g *SubtaskGraph) linkSuccs() error {
	ordered := true
	for s := 0; s < len(g.Subtasks) && ordered; s++ {
		for _, p := range g.Preds.Row(int32(s)) {
			if p >= int32(s) {
				ordered = false
				break
			}
		}
	}
	return g.invertPreds(ordered)
}

// invertPreds fills Succs from Preds and refuses a cyclic graph. ordered
// says every predecessor has a lower index than its subtask (lowering's
// groups come out in topological order): then the graph is acyclic
// without a sort.
func (g *SubtaskGraph) invertPreds(ordered bool) error {
	n := len(g.Subtasks)
	g.Succs = g.Preds.Invert(n)
	if ordered {
		return nil
	}
	if _, cyc := topoOrder(n, func(i int) []int32 { return g.Preds.Row(int32(i)) }); cyc >= 0 {
		return fmt.Errorf("subtask graph has a cycle through subtask %d", cyc)
	}
	return nil
}

// GroupSubtasks builds the linked subtask graph whose subtask i is made of
// the chunks of row i of groups, in execution order; it does what
// AddSubtask for every group and then Link do, in fewer passes. A chunk is
// an output of its subtask when a chunk of another subtask reads it or
// export[c] is set; outputs are numbered in the order of their group's row.
// Chunks in no group (fetched from earlier stages) belong to no subtask.
// The graph keeps groups.Dst as its table of chunks: the caller must not
// modify it afterwards.
func GroupSubtasks(chunks *ChunkGraph, groups CSR, export []bool) (*SubtaskGraph, error) {
	return GroupSubtasksThen(chunks, groups, export, nil)
}

// scanPreds is how many predecessors of a subtask GroupSubtasksThen scans
// for a repeat before it indexes them.
const scanPreds = 32

// GroupSubtasksThen is GroupSubtasks that also starts then(g) (unless it
// is nil), on a goroutine of its own, as soon as g's Preds and Succs are
// final: in a big graph beside numbering the outputs, and in any graph
// without waiting for it to return. then is called exactly when
// GroupSubtasksThen succeeds. Until GroupSubtasksThen returns, then may
// read only g's Preds, Succs and len(Subtasks): the rest of g is still
// being written.
func GroupSubtasksThen(chunks *ChunkGraph, groups CSR, export []bool, then func(*SubtaskGraph)) (*SubtaskGraph, error) {
	n := chunks.Len()
	ng := groups.Rows()
	g := &SubtaskGraph{
		Chunks:   chunks,
		Subtasks: HugePages(make([]Subtask, ng)),
		Owner:    HugePages(make([]int32, n)),
		OutIndex: HugePages(make([]int32, n)),
	}
	if ng > 0 {
		g.chunks = groups.Dst[:groups.Off[ng]] // the last subtask's chunks end at the table's end
	}
	for i := range g.Owner {
		g.Owner[i] = -1
		g.OutIndex[i] = -1
	}
	for s := int32(0); s < int32(ng); s++ {
		for _, c := range groups.Row(s) {
			if g.Owner[c] >= 0 {
				return nil, fmt.Errorf("chunk %d is in subtasks %d and %d", c, g.Owner[c], s)
			}
			g.Owner[c] = s
		}
	}
	// Predecessors; a chunk read by another subtask is marked for export
	// (OutIndex 0 until outputs are numbered below).
	// A subtask has at most as many predecessors as its chunks have
	// inputs: room for all of them spares growing the table by copies.
	off := HugePages(make([]int32, 1, ng+1))
	dst := HugePages(make([]int32, 0, chunks.Edges()))
	ordered := true // every predecessor has a lower index than its subtask
	// A subtask's predecessors are listed once each: a short list is
	// scanned, one past scanPreds indexed, so that a gather of thousands
	// of inputs costs time linear in them, not quadratic.
	var seen FirstIndex[int32]
	for s := int32(0); s < int32(ng); s++ {
		start := len(dst)
		for _, c := range groups.Row(s) {
			for _, in := range chunks.Inputs(c) {
				p := g.Owner[in]
				if p < 0 || p == s {
					continue
				}
				g.OutIndex[in] = 0
				if n := len(dst) - start; n < scanPreds {
					if slices.Contains(dst[start:], p) {
						continue
					}
				} else if seen.Find(n, func(i int) int32 { return dst[start+i] }, p) >= 0 {
					continue
				}
				dst = append(dst, p)
				ordered = ordered && p < s
			}
		}
		seen.Reset(math.MaxInt)
		off = append(off, int32(len(dst)))
	}
	if len(dst) == 0 {
		dst = nil // as Link leaves it
	}
	g.Preds = CSR{Off: off, Dst: dst}
	// Successors come from Preds alone and the outputs from OutIndex's
	// marks: in a big graph the two passes run side by side (on a second
	// core when there is one), each writing only its own tables.
	var linked chan error
	if ng >= parallelGroup {
		linked = make(chan error, 1)
		go func() {
			err := g.invertPreds(ordered)
			linked <- err
			if err == nil && then != nil {
				then(g)
			}
		}()
	}
	g.outputs = HugePages(make([]int32, 0, ng)) // most subtasks export one chunk
	for s := int32(0); s < int32(ng); s++ {
		c0, c1 := groups.Off[s], groups.Off[s+1]
		o0 := len(g.outputs)
		for _, c := range groups.Dst[c0:c1] {
			if export[c] || g.OutIndex[c] >= 0 {
				g.OutIndex[c] = int32(len(g.outputs) - o0)
				g.outputs = append(g.outputs, c)
			}
		}
		g.Subtasks[s] = Subtask{Raylet: -1, c0: uint32(c0), o0: uint32(o0)}
	}
	if linked != nil {
		if err := <-linked; err != nil {
			return nil, err
		}
		return g, nil
	}
	if err := g.invertPreds(ordered); err != nil {
		return nil, err
	}
	if then != nil {
		go then(g)
	}
	return g, nil
}

// parallelGroup is the number of subtasks from which GroupSubtasks links
// successors on a goroutine of their own: below it, starting one costs
// more than it saves.
const parallelGroup = 1 << 15

// Topo returns the subtasks in an order where every subtask follows its
// predecessors. Link must have succeeded.
func (g *SubtaskGraph) Topo() []int32 {
	order, _ := topoOrder(len(g.Subtasks), func(i int) []int32 { return g.Preds.Row(int32(i)) })
	return order
}
