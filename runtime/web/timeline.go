package web

import (
	"net/http"
	"strconv"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/timeline"
)

// Spans of the dashboard's task stream.
const (
	DefaultSpans = 2000
	MaxSpans     = 20000
)

// timeline serves a job's timeline: a Chrome trace / Perfetto JSON file,
// or with ?format=spans the compact, windowed spans the task stream draws.
func (s *Server) timeline(w http.ResponseWriter, r *http.Request, p Principal) {
	id, ok := jobRequest(w, r, p, "read timelines")
	if !ok {
		return
	}
	q := r.URL.Query()
	format := q.Get("format")
	if format != "" && format != "trace" && format != "spans" {
		errorf(w, dag.KindInvalidArgument, "format=%q: use trace (the default) or spans", format)
		return
	}
	var since int64
	limit := DefaultSpans
	if v := q.Get("since"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			errorf(w, dag.KindInvalidArgument, "since=%q: give a time in Unix milliseconds", v)
			return
		}
		since = ms * int64(time.Millisecond)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxSpans {
			errorf(w, dag.KindInvalidArgument, "limit=%q: give a number of spans from 1 to %d", v, MaxSpans)
			return
		}
		limit = n
	}
	snap, err := s.cfg.Head.Timeline(r.Context(), p, id)
	if err != nil {
		writeError(w, err)
		return
	}
	now := time.Now().UnixNano()
	if format == "spans" {
		writeJSON(w, http.StatusOK, spansOf(snap, now, since, limit))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Disposition", `inline; filename="job-`+strconv.FormatUint(uint64(id), 10)+`-trace.json"`)
	w.WriteHeader(http.StatusOK)
	if err := timeline.WriteTrace(w, snap, now); err != nil {
		s.log.Debug("web: writing a trace", "job", id, "err", err)
	}
}

// SpanWindow is the task stream's view of a timeline: lanes (raylet
// slots) and the newest spans ending at or after a time, each
// [lane, start, end, state, ops] with times in Unix milliseconds and ops
// an index into Ops.
type SpanWindow struct {
	Now     float64         `json:"now"`
	Dropped uint64          `json:"dropped"`
	Lanes   []timeline.Lane `json:"lanes"`
	Ops     []string        `json:"ops"`
	Spans   [][5]any        `json:"spans"`
	// Cut counts spans in the window left out by the limit (the oldest).
	Cut int `json:"cut,omitempty"`
}

func spansOf(snap timeline.Snapshot, now, since int64, limit int) SpanWindow {
	lanes, spans := timeline.Attempts(snap.Events, now)
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	win := SpanWindow{Now: ms(now), Dropped: snap.Dropped, Lanes: lanes, Ops: []string{}, Spans: [][5]any{}}
	if win.Lanes == nil {
		win.Lanes = []timeline.Lane{}
	}
	var keep []int
	for i := range spans {
		if spans[i].End >= since {
			keep = append(keep, i)
		}
	}
	if len(keep) > limit {
		// Newest by start: spans are sorted by start.
		win.Cut = len(keep) - limit
		keep = keep[len(keep)-limit:]
	}
	opIndex := map[string]int{}
	for _, i := range keep {
		sp := &spans[i]
		k, ok := opIndex[sp.Ops]
		if !ok {
			k = len(win.Ops)
			opIndex[sp.Ops] = k
			win.Ops = append(win.Ops, sp.Ops)
		}
		state := sp.State.String()
		if sp.State == timeline.Started {
			state = "running"
		}
		win.Spans = append(win.Spans, [5]any{sp.Lane, ms(sp.Start), ms(sp.End), state, k})
	}
	return win
}
