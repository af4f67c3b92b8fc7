package layering

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// layer is one row of docs/architecture.md's package table. A package
// belongs to the layer with the longest prefix (whole path segments) that
// names it; "" is the root package alone. A package may import packages
// of a lower rank, and its own descendants (transport → transport/pki);
// with only set, just the lower packages those prefixes name.
type layer struct {
	rank     int
	name     string
	prefixes []string
	only     []string
}

// layers is the house's shape, bottom up.
var layers = []layer{
	{0, "base helpers", []string{"internal/codec", "internal/ctxutil", "internal/backoff", "internal/buildinfo", "internal/yamux"}, nil},
	{1, "vocabulary", []string{"dag"}, nil},
	// The transport knows nothing of phobos's vocabulary: its error codes
	// mirror dag's kinds by number instead (transport/errors.go).
	{2, "transport", []string{"transport"}, []string{"internal"}},
	{2, "foundations", []string{"lowering", "raftmeta", "objectstore", "dag/npy"}, nil},
	{3, "runtime: tickets", []string{"runtime/ticket"}, nil},
	// What the daemons record and the web service shows: metric sets, task
	// log stores, timelines. They know only the vocabulary.
	{3, "runtime: records", []string{"runtime/metrics", "runtime/tasklog", "runtime/timeline"}, nil},
	{4, "runtime: messages", []string{"runtime/wire"}, nil},
	{5, "runtime: clients", []string{"runtime/leader", "runtime/objclient"}, nil},
	{6, "runtime: launcher", []string{"runtime/cluster"}, nil},
	// The web service defines what it asks of a head and a raylet; the
	// daemons implement it and start it.
	{7, "runtime: web service", []string{"runtime/web"}, nil},
	{8, "runtime: daemons", []string{"runtime/head", "runtime/raylet"}, nil},
	{9, "driver API", []string{""}, nil},
	// Bindings build graphs over the vocabulary; they may use the driver
	// API for conveniences (fn.Get), never the runtime's insides.
	{10, "bindings", []string{"bindings"}, []string{"", "dag", "internal"}},
	{11, "harnesses", []string{"chaos", "internal/testutil", "internal/layering", "runtime/web/webtest"}, nil},
	// The in-process cluster drives heads and raylets directly and uses the
	// harnesses' ID-sequence model.
	{12, "in-process harness", []string{"internal/sim", "internal/simraylets"}, nil},
	{13, "CLI", []string{"cli"}, nil},
	{14, "example runner", []string{"examples/internal"}, nil},
	{15, "programs", []string{"cmd", "examples"}, nil},
}

// pureRule declares a package a deterministic machine: it imports none of
// the standard library's I/O, concurrency, randomness or logging, reads no
// clock and starts no timers (time.Time and time.Duration values are
// fine), and imports from phobos only what allow names (prefixes; nil:
// only dag). A machine may log through a *slog.Logger its shell hands it
// (logSink): lines are outputs, like effects, and read nothing back.
type pureRule struct {
	pkg     string
	allow   []string
	logSink bool
}

// pure lists the deterministic machines: the leader machine and the
// raylet's core.
var pure = []pureRule{
	{pkg: "runtime/head/sched", allow: []string{"dag", "internal/codec", "lowering", "runtime/wire"}, logSink: true},
	{pkg: "runtime/raylet/core"},
}

// impureStd are standard packages a pure package may not import (a path
// or a path prefix ending in "/").
var impureStd = []string{
	"net", "net/", "os", "os/", "syscall", "io/fs", "io/ioutil", "path/filepath",
	"sync", "sync/", "runtime", "runtime/",
	"crypto/rand", "math/rand", "math/rand/",
	"log", "log/",
	"github.com/hashicorp/", "go.etcd.io/", "github.com/edsrzf/",
}

// clockFuncs are the functions of package time a pure package may not call.
var clockFuncs = []string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick"}

func TestLayering(t *testing.T) {
	root, module := moduleRoot(t)
	pkgs, err := load(root, module)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("found only %d packages under %s; the walk is broken", len(pkgs), root)
	}
	for _, v := range check(pkgs, layers, pure) {
		t.Error(v)
	}
}

// The checker catches each kind of breach in a small module made for it.
func TestCheckerCatchesBreaches(t *testing.T) {
	pkgs, err := load(filepath.Join("testdata", "mod"), "example.com/m")
	if err != nil {
		t.Fatal(err)
	}
	rules := []pureRule{{pkg: "runtime/head/machine", allow: []string{"dag", "runtime/wire"}}}
	got := check(pkgs, layers, rules)
	want := []string{
		`dag imports transport: vocabulary (rank 1) may import only lower layers`,
		`runtime/head/machine calls time.Now in machine.go: a pure package takes the time as a value`,
		`runtime/head/machine imports raftmeta: a pure package imports from phobos only [dag runtime/wire]`,
		`runtime/head/machine imports sync: a pure package does no I/O and starts no goroutines`,
		`runtime/wire imports runtime/leader: runtime: messages (rank 4) may import only lower layers`,
		`tools/stray is in no layer of internal/layering's table; add it where docs/architecture.md puts it`,
		`transport imports dag: transport may import from phobos only [internal]`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("breaches found:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// pkg is one package: its path relative to the module ("" for the root)
// and its non-test files.
type pkg struct {
	rel   string
	files map[string]*ast.File // by file name
}

// load parses every non-test Go file of the module at root, whatever its
// build constraints (a file behind a build tag obeys the rules too).
func load(root, module string) (map[string]*pkg, error) {
	pkgs := map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			rel = ""
		}
		if pkgs[rel] == nil {
			pkgs[rel] = &pkg{rel: rel, files: map[string]*ast.File{}}
		}
		pkgs[rel].files[name] = f
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Keep the module path on the side: imports are compared relative to it.
	for _, p := range pkgs {
		for _, f := range p.files {
			for _, im := range f.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				if path == module {
					im.Path.Value = strconv.Quote("phobos:")
				} else if rest, ok := strings.CutPrefix(path, module+"/"); ok {
					im.Path.Value = strconv.Quote("phobos:" + rest)
				}
			}
		}
	}
	return pkgs, nil
}

// within reports whether rel is prefix or below it, by whole segments.
func within(rel, prefix string) bool {
	if prefix == "" {
		return rel == ""
	}
	return rel == prefix || strings.HasPrefix(rel, prefix+"/")
}

// layerOf returns the layer of rel: the one with the longest prefix naming it.
func layerOf(rel string, ls []layer) (layer, bool) {
	best, found := layer{}, false
	bestLen := -1
	for _, l := range ls {
		for _, p := range l.prefixes {
			if within(rel, p) && len(p) > bestLen {
				best, found, bestLen = l, true, len(p)
			}
		}
	}
	return best, found
}

func anyWithin(rel string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return within(rel, p) })
}

func stdImpure(path string) bool {
	return slices.ContainsFunc(impureStd, func(p string) bool {
		if strings.HasSuffix(p, "/") {
			return strings.HasPrefix(path, p)
		}
		return path == p
	})
}

// check returns every breach of the rules, sorted, one sentence each.
func check(pkgs map[string]*pkg, ls []layer, rules []pureRule) []string {
	var out []string
	add := func(format string, args ...any) {
		if v := fmt.Sprintf(format, args...); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	for rel, p := range pkgs {
		me, ok := layerOf(rel, ls)
		if !ok {
			add("%s is in no layer of internal/layering's table; add it where docs/architecture.md puts it", rel)
			continue
		}
		rule, isPure := pureRule{}, false
		for _, r := range rules {
			if r.pkg == rel {
				rule, isPure = r, true
			}
		}
		for fname, f := range p.files {
			timeName := ""
			for _, im := range f.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				dep, internal := strings.CutPrefix(path, "phobos:")
				if isPure && !internal && stdImpure(path) && !(rule.logSink && path == "log/slog") {
					add("%s imports %s: a pure package does no I/O and starts no goroutines", rel, path)
				}
				if path == "time" {
					timeName = "time"
					if im.Name != nil {
						timeName = im.Name.Name
					}
				}
				if !internal {
					continue
				}
				if isPure {
					allow := rule.allow
					if allow == nil {
						allow = []string{"dag"}
					}
					if !anyWithin(dep, allow) {
						add("%s imports %s: a pure package imports from phobos only %v", rel, dep, allow)
					}
				}
				if within(dep, rel) && rel != "" {
					continue // its own descendant
				}
				them, ok := layerOf(dep, ls)
				switch {
				case !ok:
					// reported for dep itself
				case them.rank >= me.rank:
					add("%s imports %s: %s (rank %d) may import only lower layers", rel, dep, me.name, me.rank)
				case me.only != nil && !anyWithin(dep, me.only):
					add("%s imports %s: %s may import from phobos only %v", rel, dep, me.name, me.only)
				}
			}
			if isPure && timeName != "" && timeName != "_" {
				ast.Inspect(f, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == timeName && slices.Contains(clockFuncs, sel.Sel.Name) {
						add("%s calls time.%s in %s: a pure package takes the time as a value", rel, sel.Sel.Name, fname)
					}
					return true
				})
			}
		}
	}
	slices.Sort(out)
	return out
}

// moduleRoot finds the go.mod above this package and reads its module path.
func moduleRoot(t *testing.T) (string, string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.TrimSpace(m)
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
