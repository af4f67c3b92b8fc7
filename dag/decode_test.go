package dag

import (
	"bytes"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/phobos-project/phobos/internal/codec"
)

type decodeTestOp struct{ name string }

func (o decodeTestOp) Name() string { return o.name }

var (
	opA = OpIDOf("dag.test.decode.a")
	opB = OpIDOf("dag.test.decode.b")
)

func init() {
	MustRegister(decodeTestOp{"dag.test.decode.a"})
	MustRegister(decodeTestOp{"dag.test.decode.b"})
}

// plainGraph is TileableGraph without its UnmarshalCBOR: what the generic
// decoder makes of the same bytes.
type plainGraph struct {
	Nodes   []plainNode `cbor:"1,keyasint"`
	Outputs []int32     `cbor:"2,keyasint"`
}

type plainNode struct {
	Op           OpID    `cbor:"1,keyasint"`
	Args         []byte  `cbor:"2,keyasint,omitempty"`
	Inputs       []int32 `cbor:"3,keyasint,omitempty"`
	Shape        []int64 `cbor:"4,keyasint,omitempty"`
	DType        DType   `cbor:"5,keyasint,omitempty"`
	ChunkSize    []int64 `cbor:"6,keyasint,omitempty"`
	Label        string  `cbor:"7,keyasint,omitempty"`
	ChunkDefault bool    `cbor:"8,keyasint,omitempty"`
}

func sampleGraph() *TileableGraph {
	return &TileableGraph{
		Nodes: []TileableNode{
			{Op: opA, Args: []byte{0xa1, 0x01, 0x07}, Shape: []int64{1000, 3}, DType: Float64, ChunkSize: []int64{100, 3}, Label: "a", ChunkDefault: true},
			{Op: opA, Shape: []int64{-1}, DType: Int64, ChunkSize: []int64{1 << 40}, Label: "ünïcode"},
			{Op: opB, Inputs: []int32{0, 1, 1 << 20}, Shape: []int64{1000, 3}, Label: strings.Repeat("x", 300)},
			{Op: opB, Inputs: []int32{2}},
		},
		Outputs: []int32{3, 2, -5},
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := codec.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeRoundTrip: the two-pass decoder gives the graph that was
// encoded, the generic decoder agrees with it, and decoded slices do not
// share room (appending to one cannot overwrite another).
func TestDecodeRoundTrip(t *testing.T) {
	want := sampleGraph()
	data := mustMarshal(t, want)
	var got TileableGraph
	if err := codec.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, *want)
	}
	if again := mustMarshal(t, &got); !bytes.Equal(again, data) {
		t.Fatal("re-encoding the decoded graph gives other bytes")
	}
	var plain plainGraph
	if err := codec.Unmarshal(data, &plain); err != nil || !bytes.Equal(mustMarshal(t, plain), data) {
		t.Fatalf("the generic decoder disagrees: %v", err)
	}
	for i := range got.Nodes {
		n := &got.Nodes[i]
		for _, l := range []int{cap(n.Args) - len(n.Args), cap(n.Inputs) - len(n.Inputs), cap(n.Shape) - len(n.Shape), cap(n.ChunkSize) - len(n.ChunkSize)} {
			if l != 0 {
				t.Fatalf("node %d: a slice has room beyond its length, which appending would overwrite", i)
			}
		}
	}
	// The frame is not retained: scribbling over it changes nothing.
	for i := range data {
		data[i] = 0xff
	}
	if !reflect.DeepEqual(&got, want) {
		t.Fatal("the decoded graph aliases its frame")
	}
}

// TestDecodeInsideMessage: a graph inside another message (as in
// wire.SubmitJob) goes through the same decoder.
func TestDecodeInsideMessage(t *testing.T) {
	type submit struct {
		ID    int           `cbor:"1,keyasint"`
		Graph TileableGraph `cbor:"2,keyasint"`
		Name  string        `cbor:"3,keyasint"`
	}
	in := submit{ID: 7, Graph: *sampleGraph(), Name: "job"}
	var out submit
	if err := codec.Unmarshal(mustMarshal(t, in), &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("got %+v", out)
	}
	tiny := mustMarshal(t, submit{ID: 1, Graph: TileableGraph{Nodes: []TileableNode{{Op: 12345}}, Outputs: []int32{0}}})
	if err := codec.Unmarshal(tiny, &out); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "unknown op") {
		t.Fatalf("unknown op inside a message: %v", err)
	}
}

func TestDecodeRefusesMalformed(t *testing.T) {
	good := mustMarshal(t, sampleGraph())
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"not a map", []byte{0x80}, "not a map"},
		{"truncated", good[:len(good)-3], "left"},
		{"truncated head", []byte{0xa1, 0x01, 0x9a, 0x00}, "truncated"},
		{"trailing", append(append([]byte{}, good...), 0), "after the graph"},
		{"indefinite", []byte{0xbf, 0xff}, "indefinite"},
		{"nodes not array", []byte{0xa1, 0x01, 0x01}, "not an array"},
		{"node not map", []byte{0xa1, 0x01, 0x81, 0x01}, "not a map"},
		{"dup key", []byte{0xa2, 0x02, 0x80, 0x02, 0x80}, "twice"},
		{"dup node key", []byte{0xa1, 0x01, 0x81, 0xa2, 0x05, 0x01, 0x05, 0x01}, "twice"},
		{"unknown op", []byte{0xa1, 0x01, 0x81, 0xa1, 0x01, 0x07}, "unknown op"},
		{"op too big", []byte{0xa1, 0x01, 0x81, 0xa1, 0x01, 0x1b, 1, 0, 0, 0, 0, 0, 0, 0}, "out of range"},
		{"input too big", []byte{0xa1, 0x02, 0x81, 0x1a, 0x80, 0, 0, 0}, "out of range"},
		{"shape int too big", []byte{0xa1, 0x01, 0x81, 0xa1, 0x04, 0x81, 0x1b, 0x80, 0, 0, 0, 0, 0, 0, 0}, "out of range"},
		{"float shape", []byte{0xa1, 0x01, 0x81, 0xa1, 0x04, 0x81, 0xf9, 0x3c, 0x00}, "not an integer"},
		{"bad utf8 label", []byte{0xa1, 0x01, 0x81, 0xa1, 0x07, 0x62, 0xff, 0xfe}, "UTF-8"},
		{"args as text", []byte{0xa1, 0x01, 0x81, 0xa1, 0x02, 0x61, 0x41}, "major type 3"},
		{"array claims more than the frame", []byte{0xa1, 0x01, 0x9a, 0xff, 0xff, 0xff, 0xff}, "do not fit"},
		{"too many dims", append([]byte{0xa1, 0x01, 0x81, 0xa1, 0x04, 0x98, 65}, make([]byte, 65)...), "dimensions"},
	}
	for _, c := range cases {
		var g TileableGraph
		err := g.UnmarshalCBOR(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want invalid argument mentioning %q", c.name, err, c.want)
		}
	}
}

// appendHead appends a CBOR head, for building frames by hand.
func appendHead(b []byte, major byte, n uint64) []byte { return appendCBORHead(b, major<<5, n) }

// hostile frames, each about size bytes.
func hostileFrames(size int) map[string][]byte {
	op := func(b []byte) []byte { return appendHead(append(b, 0x01), 0, uint64(opA)) }
	frames := map[string][]byte{}

	// Many tiny nodes: {1: op} is 7 bytes and decodes into a 120-byte node.
	tiny := func(n int) []byte {
		b := appendHead([]byte{0xa2, 0x01}, 4, uint64(n))
		for range n {
			b = op(append(b, 0xa1))
		}
		return append(b, 0x02, 0x80)
	}
	frames["tiny nodes"] = tiny(size / 7)
	frames["tiny nodes under the bound"] = tiny(DecodeSlack / 120)

	// Huge input arrays: 1-byte ints that decode into 4 bytes each.
	inputs := func(n int) []byte {
		b := []byte{0xa2, 0x01, 0x81, 0xa2}
		b = op(b)
		b = appendHead(append(b, 0x03), 4, uint64(n))
		b = append(b, make([]byte, n)...)
		return append(b, 0x02, 0x80)
	}
	frames["huge arrays"] = inputs(size)

	// Nodes with 64-dimensional shapes: 8 bytes per byte of shape.
	dims := func(n int) []byte {
		b := appendHead([]byte{0xa2, 0x01}, 4, uint64(n))
		for range n {
			b = op(append(b, 0xa3))
			b = append(b, 0x04, 0x98, 64)
			b = append(b, make([]byte, 64)...)
			b = append(b, 0x06, 0x98, 64)
			b = append(b, make([]byte, 64)...)
		}
		return append(b, 0x02, 0x80)
	}
	frames["wide shapes"] = dims(size / 140)

	// Long labels and args: copied once.
	long := []byte{0xa2, 0x01, 0x81, 0xa3}
	long = op(long)
	long = appendHead(append(long, 0x07), 3, uint64(size/2))
	long = append(long, bytes.Repeat([]byte{'x'}, size/2)...)
	long = appendHead(append(long, 0x02), 2, uint64(size/2))
	long = append(long, make([]byte, size/2)...)
	frames["long label and args"] = append(long, 0x02, 0x80)

	// Deep nesting under an unknown key: skipped, never decoded.
	deep := []byte{0xa3, 0x01, 0x80, 0x02, 0x80, 0x09}
	for range 30 {
		deep = append(deep, 0x81)
	}
	frames["deep nesting"] = append(deep, 0x00)
	return frames
}

// TestDecodeBoundedByFrame: whatever a frame holds, decoding it allocates
// at most DecodeFactor × its size + DecodeSlack (counted as the heap's
// TotalAlloc), and a frame over that is refused having allocated almost
// nothing.
func TestDecodeBoundedByFrame(t *testing.T) {
	const size = 16 << 20
	for name, data := range hostileFrames(size) {
		var g TileableGraph
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := g.UnmarshalCBOR(data)
		runtime.ReadMemStats(&after)
		spent := int64(after.TotalAlloc - before.TotalAlloc)
		bound := int64(len(data))*DecodeFactor + DecodeSlack
		t.Logf("%s: %d bytes, decoded with %d bytes (%.1f×), err %v", name, len(data), spent, float64(spent)/float64(len(data)), err)
		if spent > bound {
			t.Errorf("%s: decoding %d bytes allocated %d, more than %d", name, len(data), spent, bound)
		}
		if err != nil {
			if !errors.Is(err, ErrResourceExhausted) {
				t.Errorf("%s: err = %v, want resource exhausted", name, err)
			}
			if spent > 64<<10 {
				t.Errorf("%s: refused after allocating %d bytes", name, spent)
			}
		}
		switch name {
		case "tiny nodes", "wide shapes", "huge arrays":
			if err == nil {
				t.Errorf("%s: %d nodes in %d bytes were decoded", name, len(g.Nodes), len(data))
			}
		case "deep nesting", "tiny nodes under the bound", "long label and args":
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

// TestDecodeUnknownOpCostsNothing: a frame of unknown ops is refused at its
// first node, before anything is allocated but the error. The bound is in
// bytes, against a 4 MiB frame: allocation counts vary under the race
// detector, which drops fmt's pooled printers at random (CI once counted
// 11 where a plain build counts 5).
func TestDecodeUnknownOpCostsNothing(t *testing.T) {
	b := appendHead([]byte{0xa1, 0x01}, 4, 1<<20)
	for range 1 << 20 {
		b = append(b, 0xa1, 0x01, 0x18, 0x2a) // op 42
	}
	var g TileableGraph
	refuse := func() {
		if err := g.UnmarshalCBOR(b); err == nil || !strings.Contains(err.Error(), "node 0: unknown op") {
			t.Fatalf("err = %v", err)
		}
	}
	refuse() // warm whatever is built once
	const runs = 5
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		refuse()
	}
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("refusing a %d-byte frame allocated %d bytes", len(b), perRun)
	if perRun > 4<<10 { // the error message only
		t.Fatalf("refusing an unknown op in a %d-byte frame allocated %d bytes; want at most 4 KiB", len(b), perRun)
	}
}

// FuzzTileableGraphDecode: any bytes decode without panicking; what
// decodes re-encodes to a graph that decodes the same, and agrees with the
// generic decoder.
func FuzzTileableGraphDecode(f *testing.F) {
	f.Add(mustMarshal(f, sampleGraph()))
	f.Add(mustMarshal(f, &TileableGraph{}))
	for _, data := range hostileFrames(200) {
		f.Add(data)
	}
	f.Add([]byte{0xf6})
	f.Fuzz(func(t *testing.T, data []byte) {
		var g TileableGraph
		err := codec.Unmarshal(data, &g)
		var direct TileableGraph
		derr := direct.UnmarshalCBOR(data)
		if err != nil {
			return
		}
		if derr != nil || !reflect.DeepEqual(g, direct) {
			t.Fatalf("through codec: %v; direct: %v", err, derr)
		}
		enc := mustMarshal(t, &g)
		var again TileableGraph
		if err := codec.Unmarshal(enc, &again); err != nil || !reflect.DeepEqual(g, again) {
			t.Fatalf("re-decoding: %v", err)
		}
		var plain plainGraph
		if err := codec.Unmarshal(data, &plain); err != nil {
			// It also refuses repeated unknown keys, which this decoder
			// skips (it tracks only small integer ones).
			var dup *cbor.DupMapKeyError
			if errors.As(err, &dup) {
				return
			}
			t.Fatalf("the generic decoder refuses what this one accepts: %v", err)
		}
		if !bytes.Equal(mustMarshal(t, plain), enc) {
			t.Fatalf("the generic decoder reads it otherwise")
		}
	})
}
