package transport

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

type benchMsg struct {
	ID   uint64 `cbor:"1,keyasint"`
	Name string `cbor:"2,keyasint"`
}

// benchHandler echoes calls without allocating beyond what transport does.
type benchHandler struct{ got chan struct{} }

func (h benchHandler) HandleCall(_ context.Context, _ *Session, _ Method, body Body) (any, error) {
	var m benchMsg
	if err := body.Decode(&m); err != nil {
		return nil, err
	}
	return &m, nil
}

func (h benchHandler) HandleMessage(_ *Session, _ Method, body Body) {
	if h.got != nil {
		h.got <- struct{}{}
	}
}

func (h benchHandler) HandleStream(_ *Session, st net.Conn) {
	defer st.Close()
	io.Copy(io.Discard, st)
	st.Write([]byte{1})
}

func benchPair(b *testing.B, h Handler) *Session {
	b.Helper()
	l, err := Listen("127.0.0.1:0", Config{Token: testToken, NodeID: "srv"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			s, err := l.Accept()
			if err != nil {
				return
			}
			s.Serve(h)
			b.Cleanup(func() { s.Close() })
		}
	}()
	c, err := Dial(context.Background(), l.Addr().String(), Config{Token: testToken, NodeID: "cli"})
	if err != nil {
		b.Fatal(err)
	}
	c.Serve(nil)
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkCall is one request/response round trip over loopback; allocs/op
// counts both ends (the client and the server run in this process).
func BenchmarkCall(b *testing.B) {
	c := benchPair(b, benchHandler{})
	ctx := context.Background()
	req := &benchMsg{ID: 7, Name: "subtask"}
	var resp benchMsg
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, 1, req, &resp); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCallParallel(b *testing.B) {
	c := benchPair(b, benchHandler{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := &benchMsg{ID: 7, Name: "subtask"}
		var resp benchMsg
		for pb.Next() {
			if err := c.Call(context.Background(), 1, req, &resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkSend measures one-way throughput: b.N messages sent, then all
// of them received.
func BenchmarkSend(b *testing.B) {
	got := make(chan struct{}, 1<<16)
	c := benchPair(b, benchHandler{got: got})
	msg := &benchMsg{ID: 7, Name: "subtask"}
	b.ReportAllocs()
	b.SetBytes(headerSize + 12)
	received := 0
	for b.Loop() {
		if err := c.Send(2, msg); err != nil {
			b.Fatal(err)
		}
		// Drain as we go so the channel never fills.
		for drained := false; !drained; {
			select {
			case <-got:
				received++
			default:
				drained = true
			}
		}
	}
	for ; received < b.N; received++ {
		<-got
	}
}

// BenchmarkBulkVsTCP copies the same bytes over a yamux bulk stream and
// over a plain loopback TCP conn in each iteration, and reports both rates
// and their ratio.
func BenchmarkBulkVsTCP(b *testing.B) {
	const size = 32 << 20
	c := benchPair(b, benchHandler{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				io.Copy(io.Discard, conn)
				conn.Write([]byte{1})
			}()
		}
	}()
	chunk := make([]byte, 256<<10)
	send := func(conn net.Conn, closeWrite func()) {
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := conn.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		closeWrite()
		var ack [1]byte
		if _, err := io.ReadFull(conn, ack[:]); err != nil {
			b.Fatal(err)
		}
		conn.Close()
	}
	var yamuxTime, tcpTime time.Duration
	b.SetBytes(size)
	for b.Loop() {
		start := time.Now()
		st, err := c.OpenStream(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		send(st, func() { st.Close() })
		yamuxTime += time.Since(start)

		start = time.Now()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		send(conn, func() { conn.(*net.TCPConn).CloseWrite() })
		tcpTime += time.Since(start)
	}
	mb := float64(size) * float64(b.N) / (1 << 20)
	b.ReportMetric(mb/yamuxTime.Seconds(), "yamux-MB/s")
	b.ReportMetric(mb/tcpTime.Seconds(), "tcp-MB/s")
	b.ReportMetric(tcpTime.Seconds()/yamuxTime.Seconds(), "yamux/tcp")
}

// BenchmarkTCPPingPong is the floor under BenchmarkCall: a 32-byte
// round trip over a plain loopback TCP conn, in the same run.
func BenchmarkTCPPingPong(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		var buf [32]byte
		for {
			if _, err := io.ReadFull(conn, buf[:]); err != nil {
				return
			}
			if _, err := conn.Write(buf[:]); err != nil {
				return
			}
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	var buf [32]byte
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.Write(buf[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
}
