package sched

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phobos-project/phobos/bindings/bench"
	"github.com/phobos-project/phobos/bindings/tensor"
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/wire"
)

var update = flag.Bool("update", false, "rewrite the golden scripts in testdata with the effects observed")

// TestScripts runs the Leader through the event scripts in
// testdata/*.script. Each command line is followed by the effects it had,
// as lines starting with "> ". The test replays the commands (checking the
// Leader's invariants after every event) and compares the effects;
// -update rewrites them. Times print as offsets from the script's start.
//
// Commands (NAME a raylet, CLIENT a driver, I a subtask's index in its
// stage, D a duration):
//
//	config KEY=VALUE...          before anything else: retries, raylet-timeout,
//	                             heartbeat, result-ttl, cancel-grace, put-grace,
//	                             max-lowerings, job-budget, admit-budget, admit-queue,
//	                             job-retention, job-retention-count, raylet-purge,
//	                             pipeline=on (off unless said)
//	records                      the Leader gets Raft's records (new leaders wait for them)
//	failover [HEAD]              a new Leader (on head HEAD) over the same Raft; every
//	                             session is gone, raylets keep their stores
//	raylet NAME SLOTS [id=ID] [addr=A] [release=old]
//	                             raylet process NAME registers (as raylet ID, default NAME,
//	                             at A, default addr-NAME); again, it reports what it holds;
//	                             release=old: a release that takes nothing ahead of its inputs
//	beat NAME | bye NAME | lose NAME
//	job TASK GRAPH [as=CLIENT] [retries=N] [ttl=D] [pipeline=off]
//	                             submit; GRAPH is "ones N CHUNK" ((ones+ones).sum()),
//	                             "unique N CHUNK" (unique().sum(): two stages) or
//	                             "fromput PUTTASK IDX N" (the sum of a put object) or
//	                             "chain N" (N subtasks, each reading the one before)
//	pull NAME CREDITS [wait=D]   NAME asks for work
//	ok NAME I...|all             NAME reports running subtasks done (one batch); I is a
//	                             subtask's index in its stage, of any job, or TASK.I
//	pullok NAME CREDITS I...|all the same, riding on a pull
//	fail NAME I KIND MSG...      NAME reports subtask I failed
//	status TASK [results] | wait TASK D [results] | cancel TASK | release TASK | jobs [as=CLIENT]
//	openputs CLIENT | attach CLIENT TASK | closedriver CLIENT
//	put CLIENT TASK IDX RAYLET | releaseput CLIENT TASK IDX | share CLIENT TASK IDX WITH
//	tick | advance D
//	hold raft|lowering | run raft|lowering | raft fail KIND | raft ok
//	raft one                     Raft (held) applies the first queued commit alone
//	states TASK [STAGE]          every subtask's state
//	infos                        how the Leader sees each raylet
//	drain ID [as=CLIENT] | undrain ID [as=CLIENT]
//	                             an operator drains raylet ID, or puts it back
func TestScripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.script")
	if len(files) == 0 {
		t.Fatal("no scripts in testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var cmds []string
			for _, l := range strings.Split(string(raw), "\n") {
				if !strings.HasPrefix(l, "> ") && strings.TrimSpace(l) != "" && l != ">" {
					cmds = append(cmds, l)
				}
			}
			got := runScript(t, cmds)
			if *update {
				if err := os.WriteFile(f, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != string(raw) {
				t.Errorf("effects differ from %s (run with -update to accept):\n%s", f, diff(string(raw), got))
			}
		})
	}
}

func runScript(t *testing.T, cmds []string) string {
	var out strings.Builder
	var h *harness
	// Scripts run without pipelining unless they ask for it (config
	// pipeline=on): most were written to show one thing each (placement,
	// stealing, lineage), and a subtask dispatched ahead of its inputs
	// would change every pull they show.
	cfg := Config{Head: "h1", NoPipeline: true}
	for _, c := range cmds {
		out.WriteString(c + "\n")
		f := strings.Fields(c)
		if strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[0] == "config" {
			if h != nil {
				t.Fatal("config must come first")
			}
			for _, kv := range f[1:] {
				setConfig(t, &cfg, kv)
			}
			continue
		}
		if h == nil {
			h = newHarness(t, cfg)
			h.out = &out
			if f[0] != "records" && f[0] != "failover" {
				h.records() // a leader that has caught up, unless the script says otherwise
			}
		}
		h.do(f)
	}
	return out.String()
}

func setConfig(t *testing.T, cfg *Config, kv string) {
	k, v, _ := strings.Cut(kv, "=")
	d := func() time.Duration {
		x, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	n := func() int64 {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	switch k {
	case "pipeline":
		cfg.NoPipeline = v != "on"
	case "retries":
		cfg.Retries = int(n())
	case "raylet-timeout":
		cfg.RayletTimeout = d()
	case "heartbeat":
		cfg.HeartbeatInterval = d()
	case "result-ttl":
		cfg.ResultTTL = d()
	case "cancel-grace":
		cfg.CancelGrace = d()
	case "put-grace":
		cfg.PutGrace = d()
	case "max-lowerings":
		cfg.MaxLowerings = int(n())
	case "job-budget":
		cfg.JobBudget = n()
	case "admit-budget":
		cfg.AdmitBudget = n()
	case "admit-queue":
		cfg.AdmitQueue = int(n())
	case "job-retention":
		cfg.JobRetention = d()
	case "job-retention-count":
		cfg.JobRetentionCount = int(n())
	case "raylet-purge":
		cfg.RayletPurgeAfter = d()
	default:
		t.Fatalf("unknown config %q", k)
	}
}

// opts splits key=value arguments off a command.
func opts(f []string) (args []string, kv map[string]string) {
	kv = map[string]string{}
	for _, a := range f {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			args = append(args, a)
		}
	}
	return args, kv
}

func (h *harness) num(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		h.t.Fatalf("not a number: %q", s)
	}
	return n
}

func (h *harness) dur(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		h.t.Fatalf("not a duration: %q", s)
	}
	return d
}

func (h *harness) driver(name string) *fakeSession {
	s := h.drivers[name]
	if s == nil {
		s = &fakeSession{name: "driver-" + name}
		h.drivers[name] = s
	}
	return s
}

func (h *harness) do(f []string) {
	f, kv := opts(f)
	client := kv["as"]
	if client == "" {
		client = "alice"
	}
	switch f[0] {
	case "records":
		h.records()
	case "restart":
		delete(h.marks, f[1]) // a new process: it remembers no marks
	case "failover":
		h.step(&StepDown{})
		if len(f) > 1 {
			h.cfg.Head = f[1]
		}
		h.lead()
	case "raylet":
		addr, id := kv["addr"], kv["id"]
		if addr == "" {
			addr = "addr-" + f[1]
		}
		if id == "" {
			id = f[1]
		}
		if kv["release"] == "old" {
			h.rayletOf(f[1]).old = true
		}
		h.registerAs(f[1], id, addr, int(h.num(f[2])))
	case "beat":
		h.step(&Heartbeat{Session: h.raylet(f[1]).sess})
	case "bye":
		h.step(&Goodbye{Call: h.call("bye " + f[1]), Session: h.raylet(f[1]).sess})
	case "lose":
		h.lose(f[1])
	case "job":
		task := dag.TaskID(h.num(f[1]))
		var t *tensor.Tensor
		var g *dag.TileableGraph
		o := wire.JobOptions{}
		switch f[2] {
		case "chain":
			g, _ = bench.Chain(h.num(f[3])).TileableGraph()
			o.Fusion = "none"
		case "ones":
			n, chunk := h.num(f[3]), h.num(f[4])
			t = tensor.Ones([]int64{n}, tensor.Chunks(chunk)).Add(tensor.Ones([]int64{n}, tensor.Chunks(chunk))).Sum()
		case "unique":
			n, chunk := h.num(f[3]), h.num(f[4])
			t = tensor.FullInt([]int64{n}, 1, tensor.Chunks(chunk)).Unique().Sum()
		case "fromput":
			id := dag.NewObjectID(dag.PackSubtaskID(dag.TaskID(h.num(f[3])), 1, uint64(h.num(f[4]))), 0)
			t = tensor.FromObject(id, dag.Meta{DType: dag.Float64, Shape: []int64{h.num(f[5])}}).Sum()
		default:
			h.t.Fatalf("unknown graph %q", f[2])
		}
		if g == nil {
			var err error
			if g, err = tensor.Graph(t); err != nil {
				h.t.Fatal(err)
			}
		}
		if v, ok := kv["retries"]; ok {
			o.Retries = int(h.num(v))
		}
		if v, ok := kv["ttl"]; ok {
			o.ResultTTL = h.dur(v)
		}
		o.NoPipeline = kv["pipeline"] == "off"
		h.submit(client, task, g, o)
	case "pull":
		wait := time.Duration(0)
		if v, ok := kv["wait"]; ok {
			wait = h.dur(v)
		}
		h.pull(f[1], int(h.num(f[2])), wait)
	case "ok", "pullok", "fail":
		name := f[1]
		fr := h.raylet(name)
		sel := f[2:]
		if f[0] == "pullok" {
			sel = f[3:]
		}
		var done []wire.Completion
		for _, sp := range fr.running {
			i, ti := strconv.FormatInt(h.idx(sp.ID), 10), h.sid(sp.ID)
			switch {
			case f[0] == "fail" && (i == f[2] || ti == f[2]):
				done = append(done, failed(sp, kindByName(h.t, f[3]), strings.Join(f[4:], " ")))
			case f[0] != "fail" && (sel[0] == "all" || slices.Contains(sel, i) || slices.Contains(sel, ti)):
				done = append(done, ok(sp))
			}
		}
		if f[0] == "pullok" {
			h.pull(name, int(h.num(f[2])), 0, done...)
		} else {
			h.report(name, done)
		}
	case "status":
		c := h.call(fmt.Sprintf("status %s", f[1]))
		ev := &WaitJob{Call: c, Caller: Caller{Name: client, Admin: client == "admin"}}
		ev.Task, ev.Results = dag.TaskID(h.num(f[1])), slices.Contains(f, "results")
		h.step(ev)
	case "wait":
		c := h.call(fmt.Sprintf("wait %s %s", f[1], f[2]))
		ev := &WaitJob{Call: c, Caller: Caller{Name: client, Admin: client == "admin"}}
		ev.Task, ev.Timeout, ev.Results = dag.TaskID(h.num(f[1])), h.dur(f[2]), slices.Contains(f, "results")
		h.step(ev)
	case "cancel":
		h.step(&CancelJob{Call: h.call("cancel " + f[1]), Caller: Caller{Name: client, Admin: client == "admin"}, Task: dag.TaskID(h.num(f[1]))})
	case "release":
		h.step(&ReleaseJob{Call: h.call("release " + f[1]), Caller: Caller{Name: client, Admin: client == "admin"}, Task: dag.TaskID(h.num(f[1]))})
	case "jobs":
		h.step(&ListJobs{Call: h.call("jobs"), Caller: Caller{Name: client, Admin: client == "admin"}})
	case "openputs":
		h.raft.req++
		var req RequestID
		copy(req[:], fmt.Sprintf("openputs-%08d", h.raft.req))
		h.step(&OpenPuts{Call: h.call("openputs " + f[1]), Caller: Caller{Name: f[1]}, Session: h.driver(f[1]), RequestID: req})
	case "attach":
		h.step(&AttachPuts{Call: h.call("attach " + f[1]), Caller: Caller{Name: f[1]}, Session: h.driver(f[1]), Task: dag.TaskID(h.num(f[2]))})
	case "closedriver":
		s := h.driver(f[1])
		delete(h.drivers, f[1])
		h.step(&SessionClosed{Session: s})
	case "put", "releaseput", "share":
		id := dag.NewObjectID(dag.PackSubtaskID(dag.TaskID(h.num(f[2])), 1, uint64(h.num(f[3]))), 0)
		caller := Caller{Name: f[1]}
		switch f[0] {
		case "put":
			ev := &PutObject{Call: h.call("put " + f[1]), Caller: caller}
			ev.ID, ev.Raylet, ev.Size = id, f[4], 8
			h.raylet(f[4]).store[id] = 8
			h.step(ev)
		case "releaseput":
			h.step(&ReleaseObject{Call: h.call("releaseput " + f[1]), Caller: caller, ID: id})
		case "share":
			ev := &ShareObject{Call: h.call("share " + f[1]), Caller: caller}
			ev.ID, ev.With = id, f[4]
			h.step(ev)
		}
	case "tick":
		h.step(&Tick{})
	case "advance":
		h.advance(h.dur(f[1]))
	case "hold":
		switch f[1] {
		case "raft":
			h.holdRaft = true
		case "lowering":
			h.holdLower = true
		}
	case "run":
		switch f[1] {
		case "raft":
			h.holdRaft = false
		case "lowering":
			h.holdLower = false
		}
		h.drain()
	case "raft":
		switch f[1] {
		case "ok":
			h.raft.fail = nil
		case "one":
			h.applyOne()
		default:
			h.raft.fail = dag.Errorf(kindByName(h.t, f[2]), "raft refuses")
		}
	case "states":
		task := dag.TaskID(h.num(f[1]))
		k := 0
		if len(f) > 2 {
			k = int(h.num(f[2])) - 1
		}
		info, ok := h.l.s.Job(task)
		if !ok {
			h.emit("job %d is not scheduled", task)
			return
		}
		j := h.stage(task, k)
		var parts []string
		for i := range j.state {
			parts = append(parts, fmt.Sprintf("%d:%s", i, j.state[i]))
		}
		h.emit("%s %d/%d %s", info.Status, info.Done, info.Subtasks, strings.Join(parts, " "))
		if info.Err != nil {
			h.emit("error %s", info.Err)
		}
	case "infos":
		h.step(&RayletInfos{Call: h.call("infos")})
	case "drain", "undrain":
		h.step(&DrainRaylet{Call: h.call(f[0] + " " + f[1]), Caller: Caller{Name: client, Admin: client == "admin"}, ID: f[1], Undrain: f[0] == "undrain"})
	default:
		h.t.Fatalf("unknown script command %q", f[0])
	}
}

func kindByName(t testing.TB, s string) dag.Kind {
	for k := dag.KindUnknown; k <= dag.KindUserCode; k++ {
		if strings.ReplaceAll(k.Error(), " ", "-") == s {
			return k
		}
	}
	t.Fatalf("unknown error kind %q (use e.g. unavailable, error-in-user-code, execution-interrupted)", s)
	return 0
}

func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "line %d:\n  want %q\n  got  %q\n", i+1, a, c)
		}
	}
	return b.String()
}
