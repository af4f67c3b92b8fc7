package transport

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
)

// recordConn records each Write the coalescer makes on the wire.
type recordConn struct {
	net.Conn
	writes [][]byte
}

func (r *recordConn) Write(p []byte) (int, error) {
	r.writes = append(r.writes, append([]byte(nil), p...))
	return len(p), nil
}

func yamuxHeader(typ uint8, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

func TestCoalesceConn(t *testing.T) {
	rec := &recordConn{}
	c := &coalesceConn{Conn: rec}
	body := []byte("payload")
	steps := []struct {
		name   string
		write  []byte
		wantN  int
		writes int // total writes on the wire after this step
	}{
		{"window update passes through", yamuxHeader(1, 100), 12, 1},
		{"empty data header passes through", yamuxHeader(yamuxTypeData, 0), 12, 2},
		{"data header is held", yamuxHeader(yamuxTypeData, 7), 12, 2},
		{"body goes out with it", body, 7, 4}, // writev on TCP; two writes here
		{"ping passes through", yamuxHeader(2, 0), 12, 5},
	}
	for _, st := range steps {
		n, err := c.Write(st.write)
		if err != nil || n != st.wantN {
			t.Fatalf("%s: wrote %d, %v; want %d", st.name, n, err, st.wantN)
		}
		if len(rec.writes) != st.writes {
			t.Fatalf("%s: %d writes on the wire, want %d", st.name, len(rec.writes), st.writes)
		}
	}
	// A non-TCP conn gets the header and body as two writes, in order.
	got := bytes.Join(rec.writes, nil)
	want := bytes.Join([][]byte{yamuxHeader(1, 100), yamuxHeader(0, 0), yamuxHeader(0, 7), body, yamuxHeader(2, 0)}, nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("wire bytes\n%x\nwant\n%x", got, want)
	}
}
