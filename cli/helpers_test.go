package cli

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
)

var (
	binOnce sync.Once
	binPath string
	binDir  string
	binErr  error
)

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return fmt.Sprintf("go build: %v\n%s", e.err, e.out) }

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}
