package dag

import (
	"bytes"
	"testing"
)

func TestPartitions(t *testing.T) {
	parts := [][]byte{[]byte("alpha"), {}, []byte("gamma-delta")}
	sizes := []int{5, 0, 11}
	buf := make([]byte, PartitionedSize(sizes))
	for p, dst := range WritePartitionHeader(buf, sizes) {
		copy(dst, parts[p])
	}
	for p := range parts {
		got, err := Partition(buf, p)
		if err != nil || !bytes.Equal(got, parts[p]) {
			t.Fatalf("part %d = %q, %v", p, got, err)
		}
	}
	for _, bad := range []int{-1, 3} {
		if _, err := Partition(buf, bad); err == nil {
			t.Fatalf("part %d accepted", bad)
		}
	}
	if _, err := Partition(buf[:10], 0); err == nil {
		t.Fatal("truncated header accepted")
	}
	if _, err := Partition(buf[:len(buf)-1], 2); err == nil {
		t.Fatal("truncated data accepted")
	}
	id := NewObjectID(PackSubtaskID(1, 1, 5), 2)
	pid := PartObjectID(id, 7)
	if pid.Subtask() != id.Subtask() || pid == id || pid.Output()&0xff != 2 || pid.Output()>>8&0x7fffff != 7 {
		t.Fatalf("part object id %s", pid)
	}
}

func FuzzPartitionRange(f *testing.F) {
	buf := make([]byte, PartitionedSize([]int{3, 4}))
	WritePartitionHeader(buf, []int{3, 4})
	f.Add(buf, 1)
	f.Fuzz(func(t *testing.T, b []byte, p int) {
		s, e, err := PartitionRange(b, int64(len(b)), p)
		if err == nil && (s < 0 || e < s || e > int64(len(b))) {
			t.Fatalf("range [%d,%d) outside %d bytes", s, e, len(b))
		}
	})
}
