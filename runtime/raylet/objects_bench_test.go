package raylet

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/phobos-project/phobos/runtime/wire"
)

// BenchmarkTransfer moves a 256 MiB object from one raylet's store into
// another's (a yamux bulk stream over loopback TCP, CRC-32C on both sides,
// straight into the receiver's arena) and, in the same iterations, the
// same number of bytes over a plain loopback TCP connection from one
// buffer into another: the physical limit. It reports both rates and
// transfer/tcp (the target is at least 0.5).
func BenchmarkTransfer(b *testing.B) {
	const size = 256 << 20
	a := startRaylet(b, "a", size+(1<<20))
	r := startRaylet(b, "b", size+(1<<20))
	id := testObject(1)
	putObject(b, a.Store(), id, randomBytes(size, 1), nil)
	in := &wire.InputSpec{Object: id, Size: size, Locations: []string{a.Addr()}}
	fetch := func() {
		if err := r.peers.fetch(b.Context(), r.Store(), in); err != nil {
			b.Fatal(err)
		}
		if err := r.Store().Delete(id); err != nil {
			b.Fatal(err)
		}
	}
	fetch() // fault the receiver's arena pages in once, as a raylet does once

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	src, dst := make([]byte, size), make([]byte, size)
	copy(dst, src)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write(src)
			}()
		}
	}()
	rawTCP := func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if _, err := io.ReadFull(c, dst); err != nil {
			b.Fatal(err)
		}
	}
	rawTCP()

	var xferTime, tcpTime time.Duration
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		fetch()
		xferTime += time.Since(start)
		start = time.Now()
		rawTCP()
		tcpTime += time.Since(start)
	}
	mb := float64(size) * float64(b.N) / (1 << 20)
	b.ReportMetric(mb/xferTime.Seconds(), "transfer-MB/s")
	b.ReportMetric(mb/tcpTime.Seconds(), "tcp-MB/s")
	b.ReportMetric(tcpTime.Seconds()/xferTime.Seconds(), "transfer/tcp")
}
