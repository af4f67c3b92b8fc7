package exrun

import (
	"context"
	"testing"
	"time"

	"github.com/phobos-project/phobos"
)

// Local starts an embedded cluster for an example's test and stops it at
// the end of the test.
func Local(t testing.TB) (*phobos.Client, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c, err := phobos.Local(ctx, phobos.LocalConfig{Raylets: 2, Slots: 2, StoreSize: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ctx
}
