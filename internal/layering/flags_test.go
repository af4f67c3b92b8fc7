package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// flagUsers are the packages that may write command-line flags in their
// strings: the CLI, and the code that builds the argument lists of the
// processes it starts (a cluster on this machine, the chaos harness, the
// examples' launcher, the browser the dashboard tests drive) or documents
// them (deploy). Every other package is a library: its errors name the
// Config field, and a program that sets the field from a flag maps the
// name to the flag (Config.SettingNames), as the CLI does.
var flagUsers = []string{
	"cli", "cmd", "runtime/cluster", "chaos", "examples", "deploy", "runtime/web/internal/cdp",
}

// flagLike is a command-line flag at the start of a string or after a
// space, parenthesis or comma: "--store-size", "(--max-frame)".
var flagLike = regexp.MustCompile(`(^|[\s(,])--[a-z][a-z0-9-]+`)

// TestLibrariesNameNoFlags: no string literal outside flagUsers holds a
// command-line flag (issue 14: library errors no longer name CLI flags; the
// CLI adds them).
func TestLibrariesNameNoFlags(t *testing.T) {
	root, _ := moduleRoot(t)
	fset := token.NewFileSet()
	var found []string
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor" || anyWithin(rel, flagUsers)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err == nil && flagLike.MatchString(s) {
				found = append(found, fset.Position(lit.Pos()).String()+": "+s)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("scanned only %d files under %s; the walk is broken", files, root)
	}
	for _, f := range found {
		t.Errorf("a library string names a command-line flag; name the Config field (SettingNames maps it to the flag in the CLI):\n\t%s", f)
	}
}

// The check sees what it is meant to: a flag after a space or a
// parenthesis, not a double dash inside a word or an em-dash.
func TestFlagLike(t *testing.T) {
	for s, want := range map[string]bool{
		"raise --store-size":         true,
		"(--max-frame)":              true,
		"--token-file names it":      true,
		"a, --tls-ca":                true,
		"not a flag — a dash":        false,
		"x--y":                       false,
		"Config.Capacity":            false,
		"-- a separator, then words": false,
	} {
		if got := flagLike.MatchString(s); got != want {
			t.Errorf("flagLike(%q) = %v, want %v", s, got, want)
		}
	}
}
