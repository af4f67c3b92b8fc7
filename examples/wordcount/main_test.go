package main

import (
	"strings"
	"testing"

	"github.com/phobos-project/phobos/bindings/kv"
	"github.com/phobos-project/phobos/examples/internal/exrun"
)

func TestWordCount(t *testing.T) {
	c, ctx := exrun.Local(t)
	parts, lines, reducers = 6, 2000, 3
	got, err := count(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	want := kv.CountWords(kv.GenerateText(parts, lines, 42))
	if len(got) != len(want) {
		t.Fatalf("%d distinct words, want %d", len(got), len(want))
	}
	for w, n := range want {
		if got[w] != n {
			t.Fatalf("%q counted %v times, want %v", w, got[w], n)
		}
	}
	out, err := run(ctx, c)
	if err != nil || !strings.Contains(out, "96000 words") {
		t.Fatalf("run: %q, %v", out, err)
	}
}
