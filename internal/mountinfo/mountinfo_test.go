package mountinfo

import (
	"slices"
	"testing"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/tab\011x`: "/tab\tx", `/back\134`: `/back\`, `/odd\04`: `/odd\04`, "/plain": "/plain"} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	es, err := Parse([]byte("36 35 98:0 /mnt1 /mnt\\0402 ro,noatime master:1 - ext3 /dev/root rw,errors=continue\n\n25 1 0:22 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"))
	if err != nil || len(es) != 2 {
		t.Fatalf("Parse = %+v, %v", es, err)
	}
	if e := es[0]; e.Dev != "98:0" || e.Root != "/mnt1" || e.Point != "/mnt 2" || !e.ReadOnly || e.FSType != "ext3" {
		t.Errorf("first entry %+v", e)
	}
	if e := es[1]; e.ReadOnly || !slices.Contains(e.Super, "memory") {
		t.Errorf("second entry %+v", e)
	}
	if _, err := Parse([]byte("1 2 3\n")); err == nil {
		t.Error("a malformed line was accepted")
	}
}
