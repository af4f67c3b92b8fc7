package web

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/phobos-project/phobos/dag/npy"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// jobSucceeded checks that a job's results may be read, answering the
// reason when not.
func jobSucceeded(j *Job) error {
	switch j.State {
	case StateSucceeded:
		return nil
	case StateFailed:
		msg := "the job failed"
		if j.Error != nil {
			msg = j.Error.Message
		}
		return dag.Errorf(dag.KindFatal, "job %d failed, so it has no results: %s", j.ID, msg)
	case StateCancelled:
		return dag.Errorf(dag.KindCancelled, "job %d was cancelled, so it has no results", j.ID)
	}
	return dag.Errorf(dag.KindUnavailable, "job %d is %s (%d of %d subtasks finished); its results are ready when it succeeds",
		j.ID, j.State, j.Finished, j.Subtasks)
}

// results lists a job's outputs.
func (s *Server) results(w http.ResponseWriter, r *http.Request, p Principal) {
	id, ok := jobRequest(w, r, p, "read results")
	if !ok {
		return
	}
	j, err := s.cfg.Head.Job(r.Context(), p, id)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := jobSucceeded(&j); err != nil {
		writeError(w, err)
		return
	}
	res := j.Results
	if res == nil {
		res = []ResultInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"job": id, "results": res})
}

// Result formats.
const (
	formatJSON = "json"
	formatNpy  = "npy"
	formatRaw  = "raw"
)

// resultFormat picks ?format=, else what Accept asks for, else "" (decide
// by size).
func resultFormat(r *http.Request) (string, error) {
	switch f := r.URL.Query().Get("format"); f {
	case formatJSON, formatNpy, formatRaw:
		return f, nil
	case "":
	default:
		return "", dag.Errorf(dag.KindInvalidArgument, "format=%q: use json, npy or raw", f)
	}
	for part := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
		switch mt {
		case "application/json":
			return formatJSON, nil
		case "application/x-npy":
			return formatNpy, nil
		case "application/octet-stream":
			return formatRaw, nil
		}
	}
	return "", nil
}

// result serves one output: JSON for small values, .npy or raw bytes for
// arrays.
func (s *Server) result(w http.ResponseWriter, r *http.Request, p Principal) {
	id, ok := jobRequest(w, r, p, "read results")
	if !ok {
		return
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 {
		errorf(w, dag.KindInvalidArgument, "result %q is not an output number; outputs are numbered from 0", r.PathValue("n"))
		return
	}
	format, err := resultFormat(r)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := s.cfg.Head.Result(r.Context(), p, id, n)
	if err != nil {
		writeError(w, err)
		return
	}
	defer res.Body.Close()
	m := res.Meta
	if format == "" {
		switch {
		case res.Size <= s.cfg.Limits.JSONResultBytes:
			format = formatJSON
		case npy.Descr(m.DType) != "":
			format = formatNpy
		default:
			format = formatRaw
		}
	}
	base := fmt.Sprintf("job-%d-result-%d", id, n)
	switch format {
	case formatJSON:
		if res.Size > s.cfg.Limits.JSONResultBytes {
			errorf(w, dag.KindInvalidArgument, "result %d of job %d holds %d bytes, more than the %d served as JSON; ask for ?format=npy or ?format=raw",
				n, id, res.Size, s.cfg.Limits.JSONResultBytes)
			return
		}
		data := make([]byte, res.Size)
		if _, err := io.ReadFull(res.Body, data); err != nil {
			writeError(w, fmt.Errorf("reading result %d of job %d: %w", n, id, err))
			return
		}
		v, err := resultJSON(m, data)
		if err != nil {
			writeError(w, fmt.Errorf("result %d of job %d: %w", n, id, err))
			return
		}
		writeJSON(w, http.StatusOK, v)
	case formatNpy:
		hdr, err := npy.AppendHeader(nil, m)
		if err != nil {
			errorf(w, dag.KindInvalidArgument, "result %d of job %d (%s) has no .npy form: %v; ask for ?format=raw", n, id, m.DType, err)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/x-npy")
		h.Set("Content-Disposition", `attachment; filename="`+base+`.npy"`)
		h.Set("Content-Length", strconv.FormatInt(int64(len(hdr))+res.Size, 10))
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(hdr); err != nil {
			return
		}
		copyBody(w, res, s)
	case formatRaw:
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", `attachment; filename="`+base+`.bin"`)
		h.Set("Phobos-DType", m.DType.String())
		h.Set("Phobos-Shape", shapeString(m.Shape))
		h.Set("Content-Length", strconv.FormatInt(res.Size, 10))
		w.WriteHeader(http.StatusOK)
		copyBody(w, res, s)
	}
}

// copyBody streams a result's bytes; a body that ends early aborts the
// response, so the client sees a broken transfer rather than a short one.
func copyBody(w http.ResponseWriter, res *Result, s *Server) {
	if _, err := io.CopyN(w, res.Body, res.Size); err != nil {
		s.log.Debug("web: a result transfer ended early", "err", err)
		panic(http.ErrAbortHandler)
	}
}

func shapeString(shape []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// ResultJSON is a result served as JSON: its dtype, its shape, and its
// elements as nested arrays (a bare number for a scalar). Floats that JSON
// cannot hold are the strings "NaN", "Infinity" and "-Infinity". A value of
// dtype bytes (a Go function's result) is its CBOR decoded into JSON, or
// base64 when that is not possible.
type ResultJSON struct {
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	Data   any     `json:"data,omitempty"`
	Base64 string  `json:"base64,omitempty"`
}

func resultJSON(m dag.Meta, data []byte) (ResultJSON, error) {
	out := ResultJSON{DType: m.DType.String(), Shape: m.Shape}
	if out.Shape == nil {
		out.Shape = []int64{}
	}
	if m.DType == dag.Bytes {
		var v any
		if err := codec.Unmarshal(data, &v); err == nil {
			if j, ok := jsonable(v, 0); ok {
				if _, err := json.Marshal(j); err == nil {
					out.Data = j
					return out, nil
				}
			}
		}
		out.Base64 = base64.StdEncoding.EncodeToString(data)
		return out, nil
	}
	if want := m.Bytes(); want != int64(len(data)) {
		return out, dag.Errorf(dag.KindInternal, "a %s%v value has %d bytes, want %d", m.DType, m.Shape, len(data), want)
	}
	size := m.DType.Size()
	elem := func(i int) any {
		b := data[i*size:]
		switch m.DType {
		case dag.Float64:
			return jsonFloat(math.Float64frombits(binary.LittleEndian.Uint64(b)))
		case dag.Float32:
			return jsonFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
		case dag.Int64:
			return int64(binary.LittleEndian.Uint64(b))
		case dag.Bool:
			return b[0] != 0
		}
		return nil
	}
	var nest func(dim, off int) any
	nest = func(dim, off int) any {
		if dim == len(m.Shape) {
			return elem(off)
		}
		n := int(m.Shape[dim])
		stride := 1
		for _, d := range m.Shape[dim+1:] {
			stride *= int(d)
		}
		xs := make([]any, n)
		for i := range xs {
			xs[i] = nest(dim+1, off+i*stride)
		}
		return xs
	}
	out.Data = nest(0, 0)
	return out, nil
}

func jsonFloat(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return f
}

// jsonable turns a decoded CBOR value into one encoding/json takes (maps
// with string keys), or reports that it cannot.
func jsonable(v any, depth int) (any, bool) {
	if depth > 64 {
		return nil, false
	}
	switch x := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			je, ok := jsonable(e, depth+1)
			if !ok {
				return nil, false
			}
			m[fmt.Sprint(k)] = je
		}
		return m, true
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			je, ok := jsonable(e, depth+1)
			if !ok {
				return nil, false
			}
			out[i] = je
		}
		return out, true
	case float64:
		return jsonFloat(x), true
	case float32:
		return jsonFloat(float64(x)), true
	}
	return v, true
}
