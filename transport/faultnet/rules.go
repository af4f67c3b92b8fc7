package faultnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Cut modes.
const (
	// CutReset refuses dials at once and closes existing conns.
	CutReset = "reset"
	// CutDrop lets dials hang and holds every byte on existing conns, in
	// both directions, until the cut is lifted.
	CutDrop = "drop"
)

// AnyPeer in Link.Peer matches every peer without a rule of its own.
const AnyPeer = "*"

// DefaultLossPenalty is what a lost write costs when Link.LossPenalty is
// zero: TCP's minimum retransmission timeout.
const DefaultLossPenalty = 200 * time.Millisecond

// MaxRulesFile caps a fault file; a longer one is refused.
const MaxRulesFile = 1 << 20

// Rules are one process's network faults. The zero value injects nothing.
type Rules struct {
	// Version is chosen by the writer and echoed in the ".applied" file
	// once the rules are in force, so the writer knows when they are.
	Version int64 `json:"version"`
	// Links are the faulty links; at most one per peer.
	Links []Link `json:"links,omitempty"`
}

// Link is what happens on the way to one peer.
type Link struct {
	// Peer is the peer's dial address, or AnyPeer.
	Peer string `json:"peer"`
	// Cut is "", CutReset or CutDrop.
	Cut string `json:"cut,omitempty"`
	// Delay holds every write back this long; Jitter adds up to that much
	// more, at random (order is kept).
	Delay  Duration `json:"delay,omitempty"`
	Jitter Duration `json:"jitter,omitempty"`
	// Loss is the probability, 0 to 1, that a write is "lost" and costs
	// LossPenalty (default DefaultLossPenalty) more.
	Loss        float64  `json:"loss,omitempty"`
	LossPenalty Duration `json:"loss_penalty,omitempty"`
}

// clean reports whether the link injects nothing.
func (l *Link) clean() bool {
	return l.Cut == "" && l.Delay <= 0 && l.Jitter <= 0 && l.Loss <= 0
}

// Duration is a time.Duration written as "150ms" in JSON (a bare number
// is read as nanoseconds).
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w (want e.g. \"50ms\")", s, err)
		}
		*d = Duration(v)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("duration %s: want a string such as \"50ms\" or nanoseconds", b)
	}
	*d = Duration(n)
	return nil
}

// Validate checks r: known cut modes, non-negative times, a loss between
// 0 and 1, and at most one link per peer.
func (r *Rules) Validate() error {
	seen := map[string]bool{}
	for i, l := range r.Links {
		switch {
		case l.Peer == "":
			return fmt.Errorf("faultnet: link %d names no peer; give a dial address or %q", i, AnyPeer)
		case seen[l.Peer]:
			return fmt.Errorf("faultnet: two links for peer %s; merge them into one", l.Peer)
		case l.Cut != "" && l.Cut != CutReset && l.Cut != CutDrop:
			return fmt.Errorf("faultnet: link to %s: cut %q; want %q or %q", l.Peer, l.Cut, CutReset, CutDrop)
		case l.Delay < 0 || l.Jitter < 0 || l.LossPenalty < 0:
			return fmt.Errorf("faultnet: link to %s: negative delay, jitter or loss penalty", l.Peer)
		case !(l.Loss >= 0 && l.Loss <= 1): // also refuses NaN
			return fmt.Errorf("faultnet: link to %s: loss %v; want a probability from 0 to 1", l.Peer, l.Loss)
		}
		seen[l.Peer] = true
	}
	return nil
}

// ParseRules decodes and validates a fault file. Unknown fields are
// refused, so a misspelt rule is an error rather than no fault.
func ParseRules(b []byte) (Rules, error) {
	var r Rules
	if len(b) > MaxRulesFile {
		return r, fmt.Errorf("faultnet: rules of %d bytes; at most %d", len(b), MaxRulesFile)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return r, nil // an empty file injects nothing
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Rules{}, fmt.Errorf("faultnet: decode rules: %w", err)
	}
	if dec.More() {
		return Rules{}, errors.New("faultnet: decode rules: data after the rules object")
	}
	if err := r.Validate(); err != nil {
		return Rules{}, err
	}
	return r, nil
}

// WriteFile writes r to path atomically (a temporary file renamed over
// it), so a process polling path never reads half a file.
func WriteFile(path string, r Rules) error {
	if err := r.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("faultnet: encode rules: %w", err)
	}
	return writeAtomic(path, append(b, '\n'))
}

// AppliedPath is where a watching process acknowledges the version of the
// rules it put in force.
func AppliedPath(path string) string { return path + ".applied" }

// Applied returns the version a process watching path last put in force,
// or -1 if it has acknowledged none yet.
func Applied(path string) (int64, error) {
	b, err := os.ReadFile(AppliedPath(path))
	if errors.Is(err, os.ErrNotExist) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("faultnet: %w", err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1, fmt.Errorf("faultnet: %s holds %q, not a version", AppliedPath(path), b)
	}
	return v, nil
}

func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("faultnet: write %s: %w", path, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("faultnet: write %s: %w", path, err)
	}
	return nil
}
