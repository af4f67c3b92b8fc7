package web

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/lowering"
	"github.com/phobos-project/phobos/transport/pki"
)

// apiHandler serves one API call for a principal.
type apiHandler func(w http.ResponseWriter, r *http.Request, p Principal)

// api wraps a head's API handler: a follower proxies the call to the
// leader (once: a proxied call is served where it lands).
func (s *Server) api(h apiHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := principalOf(r)
		if r.Context().Value(servedHereKey) == nil {
			leader, err := s.cfg.Head.Leader(r.Context())
			if err != nil {
				writeError(w, err)
				return
			}
			if leader != "" {
				s.proxyTo(w, r, leader, p)
				return
			}
		}
		h(w, r, p)
	}
}

// clientRoles may use jobs.
var clientRoles = []pki.Role{pki.RoleClient, pki.RoleAdmin}

// jobID reads the {id} of the path.
func jobID(r *http.Request) (dag.TaskID, error) {
	s := r.PathValue("id")
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, dag.Errorf(dag.KindInvalidArgument, "job %q is not a job number; jobs are numbered from 1", s)
	}
	return dag.TaskID(n), nil
}

// jobRequest checks that p may do what (as a client or an admin may) and
// reads the job the path names. When either fails it writes the error,
// and ok is false.
func jobRequest(w http.ResponseWriter, r *http.Request, p Principal, what string) (id dag.TaskID, ok bool) {
	if err := needRole(p, what, clientRoles...); err != nil {
		writeError(w, err)
		return 0, false
	}
	id, err := jobID(r)
	if err != nil {
		writeError(w, err)
		return 0, false
	}
	return id, true
}

func (s *Server) cluster(w http.ResponseWriter, r *http.Request, p Principal) {
	st, err := s.cfg.Head.Cluster(r.Context(), p)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// parseJobQuery reads ?state=RUNNING,FAILED&before=N&limit=N.
func parseJobQuery(r *http.Request) (JobQuery, error) {
	q := JobQuery{Limit: DefaultJobsPage}
	v := r.URL.Query()
	for _, list := range v["state"] {
		for st := range strings.SplitSeq(list, ",") {
			st = strings.ToUpper(strings.TrimSpace(st))
			if st == "" {
				continue
			}
			if !slices.Contains(JobStates, st) {
				return q, dag.Errorf(dag.KindInvalidArgument, "state %q is not a job state; use %s", st, strings.Join(JobStates, ", "))
			}
			q.States = append(q.States, st)
		}
	}
	if b := v.Get("before"); b != "" {
		n, err := strconv.ParseUint(b, 10, 32)
		if err != nil {
			return q, dag.Errorf(dag.KindInvalidArgument, "before=%q is not a job number", b)
		}
		q.Before = dag.TaskID(n)
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxJobsPage {
			return q, dag.Errorf(dag.KindInvalidArgument, "limit=%q: give a number of jobs from 1 to %d", l, MaxJobsPage)
		}
		q.Limit = n
	}
	return q, nil
}

func (s *Server) jobs(w http.ResponseWriter, r *http.Request, p Principal) {
	if err := needRole(p, "list jobs", clientRoles...); err != nil {
		writeError(w, err)
		return
	}
	q, err := parseJobQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	page, err := s.cfg.Head.Jobs(r.Context(), p, q)
	if err != nil {
		writeError(w, err)
		return
	}
	if page.Jobs == nil {
		page.Jobs = []JobSummary{}
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) job(w http.ResponseWriter, r *http.Request, p Principal) {
	id, ok := jobRequest(w, r, p, "read jobs")
	if !ok {
		return
	}
	j, err := s.cfg.Head.Job(r.Context(), p, id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// readBody reads a request body within the server's cap.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, errBodyTooBig{tooBig.Limit}
	}
	if err != nil {
		return nil, dag.Errorf(dag.KindInvalidArgument, "reading the request body: %w", err)
	}
	return b, nil
}

type errBodyTooBig struct{ limit int64 }

func (e errBodyTooBig) Error() string {
	return fmt.Sprintf("the request body is more than the %d bytes this server accepts", e.limit)
}

// parseSubmitOptions reads ?name=&retries=&result_ttl=&fusion= and the
// Idempotency-Key header.
func parseSubmitOptions(r *http.Request) (SubmitOptions, error) {
	var o SubmitOptions
	v := r.URL.Query()
	o.Name = v.Get("name")
	if len(o.Name) > 256 {
		return o, dag.Errorf(dag.KindInvalidArgument, "a job name of %d bytes is too long (at most 256)", len(o.Name))
	}
	if s := v.Get("retries"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 100 {
			return o, dag.Errorf(dag.KindInvalidArgument, "retries=%q: give a number from 0 to 100", s)
		}
		o.Retries = n
	}
	if s := v.Get("result_ttl"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return o, dag.Errorf(dag.KindInvalidArgument, "result_ttl=%q: give a positive duration such as 10m", s)
		}
		o.ResultTTL = d
	}
	switch f := v.Get("fusion"); f {
	case "", "chain", "none", "coloring":
		o.Fusion = f
	default:
		return o, dag.Errorf(dag.KindInvalidArgument, "fusion=%q: use chain, none or coloring", f)
	}
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		sum := sha256.Sum256([]byte(k))
		copy(o.RequestID[:], sum[:])
	} else {
		rand.Read(o.RequestID[:])
	}
	return o, nil
}

// submit takes a graph file (docs/graph-format.md) as the request body.
func (s *Server) submit(w http.ResponseWriter, r *http.Request, p Principal) {
	if err := needRole(p, "submit jobs", clientRoles...); err != nil {
		writeError(w, err)
		return
	}
	o, err := parseSubmitOptions(r)
	if err != nil {
		writeError(w, err)
		return
	}
	body, err := readBody(r)
	var tooBig errBodyTooBig
	if errors.As(err, &tooBig) {
		writeErrorStatus(w, http.StatusRequestEntityTooLarge, dag.KindResourceExhausted, err.Error())
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	g, err := lowering.ParseGraphJSON(body, s.cfg.Ops)
	if err != nil {
		writeError(w, err)
		return
	}
	js, err := s.cfg.Head.Submit(r.Context(), p, g, o)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Location", fmt.Sprintf("/api/v1/jobs/%d", js.ID))
	writeJSON(w, http.StatusCreated, js)
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request, p Principal) {
	id, ok := jobRequest(w, r, p, "cancel jobs")
	if !ok {
		return
	}
	js, err := s.cfg.Head.Cancel(r.Context(), p, id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, js)
}

func (s *Server) release(w http.ResponseWriter, r *http.Request, p Principal) {
	id, ok := jobRequest(w, r, p, "release jobs' results")
	if !ok {
		return
	}
	if err := s.cfg.Head.Release(r.Context(), p, id); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}
