package dag

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestHugePagesTakesTheAdviceBack checks that a table HugePages backed is
// unchanged and that its range does not keep the huge-page advice: a
// range marked "hg" would be collapsed into huge pages by khugepaged long
// after the table is freed (see HugePages).
func TestHugePagesTakesTheAdviceBack(t *testing.T) {
	if !thpMadvise() {
		t.Skip("transparent huge pages are not set to madvise here")
	}
	const n = 4 * hugePage / 8
	s := make([]int64, n, n+7)
	p, l, c := unsafe.SliceData(s), len(s), cap(s)
	s = HugePages(s)
	if unsafe.SliceData(s) != p || len(s) != l || cap(s) != c {
		t.Fatalf("HugePages changed the slice")
	}
	for i, v := range s[:cap(s)] {
		if v != 0 {
			t.Fatalf("element %d is %d after HugePages, want 0", i, v)
		}
	}
	// The middle of the table is inside one of its whole huge pages.
	vma, err := mappingOf(uintptr(unsafe.Pointer(&s[n/2])))
	if err != nil {
		t.Fatal(err)
	}
	if flags := vma["VmFlags"]; strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("the table's mapping keeps the huge-page advice: VmFlags %q", flags)
	}
	// The kernel may decline huge pages (memory too fragmented), so
	// this is reported, not required.
	t.Logf("AnonHugePages of the table's mapping: %s", vma["AnonHugePages"])
}

// mappingOf returns the fields of the /proc/self/smaps entry of the
// mapping holding address a.
func mappingOf(a uintptr) (map[string]string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var cur map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			if cur != nil {
				return cur, nil
			}
			lo, hi, _ := strings.Cut(fields[0], "-")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil && uint64(a) >= l && uint64(a) < h {
				cur = map[string]string{}
			}
			continue
		}
		if cur != nil {
			k, v, _ := strings.Cut(line, ":")
			cur[k] = strings.TrimSpace(v)
		}
	}
	if cur != nil {
		return cur, sc.Err()
	}
	return nil, fmt.Errorf("no mapping of /proc/self/smaps holds %#x", a)
}
