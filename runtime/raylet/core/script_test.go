package core

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
)

var update = flag.Bool("update", false, "rewrite the golden scripts in testdata with the effects observed")

// TestScripts drives a machine through the event scripts in
// testdata/*.script. Each event line is followed by the effects it had, as
// lines starting with "> "; the test replays the events, checks the
// invariants after each, and compares the effects (-update rewrites them).
// Subtasks are named by letters, completions are the names of their
// subtasks (":dropped" or ":abandoned" when the machine made them), and
// times are offsets from the start of the script. Every event may say
// at=DUR to move the clock (never back); the clock stays where the last
// event left it.
//
// Events:
//
//	config slots=N prefetch=N grace=DUR room=SIZE   a new machine (first line)
//	room SIZE                      the store's room changed
//	pulled [NAME:SIZE[@A+B]...] [more]
//	                               the pull's reply: subtasks and working sets,
//	                               and the subtasks each waits for (After);
//	                               more: the head has more queued for us
//	pull-failed AT                 the pull did not reach the head at AT
//	reported | report-failed AT    the answer to a report
//	registered                     registered with a new leader
//	finished SLOT [took=DUR] [failed]
//	                               the slot's current run ended (took 1s);
//	                               failed: its completion is NAME:failed
//	finished run=N [took=DUR]      run N ended (an abandoned one)
//	cancel NAME...                 the head cancels subtasks
//	tick AT                        the timer fired at AT
//	state                          print the counters
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
			s := &script{t: t, ids: map[string]dag.SubtaskID{}}
			for _, l := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
				if strings.HasPrefix(l, ">") {
					continue
				}
				s.out.WriteString(l + "\n")
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					s.do(l)
				}
			}
			got := s.out.String()
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

type script struct {
	t     *testing.T
	m     *Machine[string, string]
	epoch time.Time
	now   time.Time // the script's clock: set by at=, tick and the failures
	// awaiting says whether a pull or a report is out, to be answered.
	awaiting map[Kind]bool
	ids      map[string]dag.SubtaskID
	out      strings.Builder
}

func (s *script) do(line string) {
	f := strings.Fields(line)
	args, opts := split(f[1:])
	if at, ok := opts["at"]; ok {
		s.setClock(at)
	}
	answer := func(k Kind) {
		if !s.awaiting[k] {
			s.t.Fatalf("%q: no %v is out", line, k)
		}
		s.awaiting[k] = false
	}
	var effs []Effect[string, string]
	switch f[0] {
	case "config":
		cfg := Config{Slots: s.int(opts["slots"]), Prefetch: s.int(opts["prefetch"]),
			CancelGrace: s.dur(opts["grace"]), Room: s.size(opts["room"])}
		m, err := New(cfg, func(t Subtask[string], why Reason) string {
			return t.Spec + map[Reason]string{Dropped: ":dropped", Abandoned: ":abandoned", InputFailed: ":inputfailed"}[why]
		}, func(c string) bool { return strings.Contains(c, ":") })
		if err != nil {
			s.t.Fatal(err)
		}
		s.m, s.epoch = m, time.Unix(1_000_000, 0)
		s.now = s.epoch
		s.awaiting = map[Kind]bool{}
		return
	case "room":
		effs = s.m.Room(s.size(args[0]), s.now)
	case "pulled":
		var tasks []Subtask[string]
		more := false
		for _, a := range args {
			if a == "more" {
				more = true
				continue
			}
			name, size, _ := strings.Cut(a, ":")
			size, after, _ := strings.Cut(size, "@")
			var ids []dag.SubtaskID
			if after != "" {
				for _, p := range strings.Split(after, "+") {
					ids = append(ids, s.id(p))
				}
			}
			tasks = append(tasks, Subtask[string]{ID: s.id(name), WorkingSet: s.size(size), After: ids, Spec: name})
		}
		answer(Pull)
		effs = s.m.Pulled(tasks, more, s.now)
	case "pull-failed":
		s.setClock(args[0])
		answer(Pull)
		effs = s.m.PullFailed(s.now)
	case "reported":
		answer(Report)
		effs = s.m.Reported(s.now)
	case "report-failed":
		s.setClock(args[0])
		answer(Report)
		effs = s.m.ReportFailed(s.now)
	case "registered":
		effs = s.m.Registered(s.now)
	case "finished":
		took := time.Second // long, unless said
		if d, ok := opts["took"]; ok {
			took = s.dur(d)
		}
		if r, ok := opts["run"]; ok {
			effs = s.m.Finished(-1, Run(s.int(r)), "run"+r, took, s.now)
			break
		}
		k := Slot(s.int(args[0]))
		sl := s.m.slots[k]
		if sl.run == 0 {
			s.t.Fatalf("%q: slot %d is idle", line, k)
		}
		c := sl.task.Spec
		if len(args) > 1 && args[1] == "failed" {
			c += ":failed"
		}
		effs = s.m.Finished(k, sl.run, c, took, s.now)
	case "cancel":
		var ids []dag.SubtaskID
		for _, a := range args {
			ids = append(ids, s.ids[a])
		}
		effs = s.m.Cancel(ids, s.now)
	case "tick":
		s.setClock(args[0])
		effs = s.m.Tick(s.now)
	case "state":
		m := s.m
		s.emit("running=%d queued=%d waiting=%d inflight=%d reserved=%s window=%d pending=[%s] abandoned=%d avg=%v",
			m.Running(), m.Queued(), m.Waiting(), m.Inflight(), sizeString(m.Reserved()), m.Window(),
			strings.Join(m.pending, " "), m.Abandoned(), m.avgRun)
		return
	default:
		s.t.Fatalf("unknown event %q", line)
	}
	for _, e := range effs {
		s.emit("%s", s.effect(e))
		if e.Kind == Pull || e.Kind == Report {
			s.awaiting[e.Kind] = true
		}
	}
	if err := s.m.check(); err != nil {
		s.t.Fatalf("after %q: %v", line, err)
	}
}

// id names subtask name, giving it an ID the first time.
func (s *script) id(name string) dag.SubtaskID {
	if _, ok := s.ids[name]; !ok {
		s.ids[name] = dag.PackSubtaskID(1, 1, uint64(len(s.ids)+1))
	}
	return s.ids[name]
}

func (s *script) effect(e Effect[string, string]) string {
	switch e.Kind {
	case Start:
		return fmt.Sprintf("start s%d %s run=%d", e.Slot, e.Task.Spec, e.Run)
	case Interrupt:
		return fmt.Sprintf("interrupt s%d %s", e.Slot, e.Task.Spec)
	case Replace:
		return fmt.Sprintf("replace s%d (abandoned %s run=%d)", e.Slot, e.Task.Spec, e.Run)
	case Drop:
		return "drop " + e.Task.Spec
	case Discard:
		return fmt.Sprintf("discard %s run=%d", e.Task.Spec, e.Run)
	case Pull:
		return fmt.Sprintf("pull credits=%d done=[%s]", e.Credits, strings.Join(e.Done, " "))
	case Report:
		return fmt.Sprintf("report [%s]", strings.Join(e.Done, " "))
	case Timer:
		if e.At.IsZero() {
			return "timer off"
		}
		return "timer " + e.At.Sub(s.epoch).String()
	}
	return e.Kind.String()
}

func (s *script) emit(format string, args ...any) { fmt.Fprintf(&s.out, "> "+format+"\n", args...) }

// split separates KEY=VALUE options from plain arguments.
func split(f []string) ([]string, map[string]string) {
	var args []string
	opts := map[string]string{}
	for _, a := range f {
		if k, v, ok := strings.Cut(a, "="); ok {
			opts[k] = v
		} else {
			args = append(args, a)
		}
	}
	return args, opts
}

func (s *script) int(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		s.t.Fatalf("not a number: %q", v)
	}
	return n
}

func (s *script) dur(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		s.t.Fatalf("not a duration: %q", v)
	}
	return d
}

// setClock moves the script's clock to v after its start; never back.
func (s *script) setClock(v string) {
	at := s.epoch.Add(s.dur(v))
	if at.Before(s.now) {
		s.t.Fatalf("the clock goes back to %s", v)
	}
	s.now = at
}

func (s *script) size(v string) int64 {
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			return int64(s.int(n)) * u.n
		}
	}
	return int64(s.int(v))
}

func sizeString(n int64) string {
	if n != 0 && n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + "MiB"
	}
	return strconv.FormatInt(n, 10)
}

// diff shows the first lines where want and got part.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n  want %q\n  got  %q", i+1, a, b)
		}
	}
	return ""
}
