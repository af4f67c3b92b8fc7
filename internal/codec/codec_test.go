package codec

import (
	"bytes"
	"testing"
	"time"
)

func TestTimeRoundTripsExactly(t *testing.T) {
	for _, tm := range []time.Time{
		time.Unix(0, 1).UTC(),
		time.Date(2026, 11, 22, 5, 13, 41, 123456789, time.UTC),
		time.Date(2399, 1, 1, 0, 0, 0, 999999999, time.UTC),
	} {
		b, err := Marshal(tm)
		if err != nil {
			t.Fatal(err)
		}
		var back time.Time
		if err := Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !back.Equal(tm) {
			t.Fatalf("%v round-tripped to %v", tm, back)
		}
	}
}

func TestDeterministicMaps(t *testing.T) {
	m := map[string]int{}
	for i := 0; i < 100; i++ {
		m[string(rune('a'+i%26))+string(rune('0'+i%10))] = i
	}
	first, _ := Marshal(m)
	for i := 0; i < 20; i++ {
		again, _ := Marshal(m)
		if !bytes.Equal(first, again) {
			t.Fatal("map encoding is not deterministic")
		}
	}
}

func TestDecodeLimits(t *testing.T) {
	// An array header claiming 2^32 elements must fail, not allocate.
	var v []int
	if err := Unmarshal([]byte{0x9b, 0, 0, 0, 1, 0, 0, 0, 0}, &v); err == nil {
		t.Fatal("huge array accepted")
	}
	// Duplicate map keys are refused.
	var m map[int]int
	if err := Unmarshal([]byte{0xa2, 0x01, 0x01, 0x01, 0x02}, &m); err == nil {
		t.Fatal("duplicate key accepted")
	}
}
