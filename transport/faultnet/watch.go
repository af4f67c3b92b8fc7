package faultnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// DefaultPollInterval is how often Watch reads the fault file.
const DefaultPollInterval = 50 * time.Millisecond

// Watch puts the rules in the file at path in force now and whenever the
// file changes, polling it every interval (DefaultPollInterval if zero)
// until ctx ends. A missing or empty file means no faults. After each
// change is in force it writes the rules' version to AppliedPath(path).
// A file that does not parse is logged and ignored (the rules in force
// stay), except at the first read, where Watch returns the error: a
// process should not start with faults it cannot read.
func (in *Injector) Watch(ctx context.Context, path string, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	last, err := readFile(path)
	if err != nil {
		return err
	}
	r, err := ParseRules(last)
	if err != nil {
		return fmt.Errorf("fault file %s: %w", path, err)
	}
	if err := in.apply(path, r); err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			b, err := readFile(path)
			if err != nil {
				in.log.Warn("faultnet: read fault file", "path", path, "err", err)
				continue
			}
			if bytes.Equal(b, last) {
				continue
			}
			last = b
			r, err := ParseRules(b)
			if err != nil {
				in.log.Warn("faultnet: fault file ignored; the previous rules stay in force", "path", path, "err", err)
				continue
			}
			if err := in.apply(path, r); err != nil {
				in.log.Warn("faultnet: acknowledge rules", "path", path, "err", err)
			}
		}
	}()
	return nil
}

func (in *Injector) apply(path string, r Rules) error {
	if err := in.Set(r); err != nil {
		return err
	}
	return writeAtomic(AppliedPath(path), []byte(strconv.FormatInt(r.Version, 10)+"\n"))
}

// readFile reads at most MaxRulesFile+1 bytes of path; a missing file is
// empty.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("faultnet: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxRulesFile+1))
	if err != nil {
		return nil, fmt.Errorf("faultnet: read %s: %w", path, err)
	}
	return b, nil
}
