package cli

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// A pipe among the watched descriptors whose reader has gone ends the
// context at the next SIGPIPE.
func TestBrokenOutputEndsTheContext(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r.Close()
	checked := make(chan bool, 1)
	ctx, cancel := cancelOnBrokenOutput(context.Background(), checked, int(w.Fd()))
	defer cancel()
	if err := syscall.Kill(os.Getpid(), syscall.SIGPIPE); err != nil {
		t.Fatal(err)
	}
	if broken := <-checked; !broken {
		t.Fatal("a pipe whose reader closed was not taken for broken")
	}
	<-ctx.Done() // cancelled once the verdict is given
}

// A SIGPIPE from a socket whose peer has gone (a head writing to a killed
// raylet) ends nothing while the watched output is healthy: the check
// that led a head to stop itself in an earlier attempt at this.
func TestSocketSIGPIPEEndsNothing(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	checked := make(chan bool, 16)
	ctx, cancel := cancelOnBrokenOutput(context.Background(), checked, int(w.Fd()))
	defer cancel()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	peer.(*net.TCPConn).SetLinger(0) // closes with a reset: the next writes fail with EPIPE
	peer.Close()
	// The first write after the reset may still be taken; a later one fails.
	for err == nil {
		_, err = conn.Write([]byte("x"))
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("writing to a reset connection: %v", err)
	}
	if !errors.Is(err, syscall.EPIPE) {
		// A reset seen first raises no SIGPIPE; the write after it does.
		if _, err = conn.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("writing to a reset connection again: %v, want EPIPE", err)
		}
	}
	select {
	case broken := <-checked:
		if broken {
			t.Fatal("a socket's SIGPIPE was taken for the output's reader going away")
		}
	case <-time.After(time.Minute):
		t.Fatal("no SIGPIPE seen in a minute after a write failed with EPIPE")
	}
	if ctx.Err() != nil {
		t.Fatal("the context ended on a socket's SIGPIPE")
	}
}
