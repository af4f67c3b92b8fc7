package dag

import "fmt"

// ObjectRun names Count objects at once: output Output of the consecutive
// subtasks First, First+1, …, First+Count-1 of stage Stage of task Task. A
// list of object IDs whose entries follow on in this way (a job's results,
// which lowering numbers in order, most often) is recorded as a few runs
// instead of 16 bytes an ID: AppendObjectRuns makes them, AppendRunIDs
// gives the IDs back, in the same order.
type ObjectRun struct {
	Task   TaskID  `cbor:"1,keyasint"`
	Stage  StageID `cbor:"2,keyasint"`
	First  uint64  `cbor:"3,keyasint"`
	Count  uint64  `cbor:"4,keyasint"`
	Output uint32  `cbor:"5,keyasint,omitempty"`
}

// AppendObjectRuns appends ids to runs, extending the last run while the
// next ID is the one after it.
func AppendObjectRuns(runs []ObjectRun, ids ...ObjectID) []ObjectRun {
	for _, id := range ids {
		st := id.Subtask()
		task, stage, ix, out := st.Task(), st.Stage(), st.Index(), id.Output()
		if n := len(runs); n > 0 {
			r := &runs[n-1]
			if r.Task == task && r.Stage == stage && r.Output == out && r.First+r.Count == ix {
				r.Count++
				continue
			}
		}
		runs = append(runs, ObjectRun{Task: task, Stage: stage, First: ix, Count: 1, Output: out})
	}
	return runs
}

// Check reports a run that names no object or an index beyond
// MaxSubtaskIndex.
func (r ObjectRun) Check() error {
	switch {
	case r.Count == 0:
		return fmt.Errorf("object run at subtask %d of stage %d of task %d: count 0", r.First, r.Stage, r.Task)
	case r.First > MaxSubtaskIndex || r.Count-1 > MaxSubtaskIndex-r.First:
		return fmt.Errorf("object run of %d from subtask %d of stage %d of task %d: beyond the last subtask index %d",
			r.Count, r.First, r.Stage, r.Task, uint64(MaxSubtaskIndex))
	}
	return nil
}

// RunsLen returns how many objects runs name.
func RunsLen(runs []ObjectRun) uint64 {
	n := uint64(0)
	for _, r := range runs {
		n += r.Count
	}
	return n
}

// AppendRunIDs appends the IDs runs name to dst, in order. The runs must
// pass Check.
func AppendRunIDs(dst []ObjectID, runs []ObjectRun) []ObjectID {
	for _, r := range runs {
		for i := uint64(0); i < r.Count; i++ {
			dst = append(dst, NewObjectID(PackSubtaskID(r.Task, r.Stage, r.First+i), r.Output))
		}
	}
	return dst
}
