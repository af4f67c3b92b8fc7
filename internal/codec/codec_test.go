package codec

import (
	"bytes"
	"strings"
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

// A time the encoder cannot write (a year past 9999, sent as integer
// seconds) is refused, and the error names where it was; one it can
// write decodes.
func TestTimeOutsideRFC3339IsRefused(t *testing.T) {
	type inner struct {
		At time.Time `cbor:"1,keyasint"`
	}
	type msg struct {
		Name  string           `cbor:"1,keyasint"`
		Heads []inner          `cbor:"2,keyasint"`
		ByID  map[string]inner `cbor:"3,keyasint"`
		Next  *msg             `cbor:"4,keyasint"` // a recursive type
	}
	far := []byte{0x1b, 0, 0, 1, 0, 0, 0, 0, 0} // 2^40 seconds: the year 36812
	for name, data := range map[string][]byte{
		"Heads[0].At":      append([]byte{0xa1, 0x02, 0x81, 0xa1, 0x01}, far...),
		"ByID[h].At":       append([]byte{0xa1, 0x03, 0xa1, 0x61, 'h', 0xa1, 0x01}, far...),
		"Next.Heads[0].At": append([]byte{0xa1, 0x04, 0xa1, 0x02, 0x81, 0xa1, 0x01}, far...),
	} {
		var m msg
		err := Unmarshal(data, &m)
		if err == nil || !strings.Contains(err.Error(), name+": year") {
			t.Errorf("%s: got %v, want an error naming the field and its year", name, err)
		}
	}
	var m msg
	if err := Unmarshal([]byte{0xa1, 0x02, 0x81, 0xa1, 0x01, 0x1a, 0x6a, 0, 0, 0}, &m); err != nil {
		t.Fatalf("integer seconds in 2026: %v", err)
	}
	if got := m.Heads[0].At.Unix(); got != 0x6a000000 {
		t.Fatalf("decoded %d seconds, want %d", got, 0x6a000000)
	}
	var bare time.Time
	if err := Unmarshal(far, &bare); err == nil || !strings.Contains(err.Error(), "time: year") {
		t.Fatalf("a bare far time: got %v", err)
	}
}
