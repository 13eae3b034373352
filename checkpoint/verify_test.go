package checkpoint

import "testing"

// TestReadDataLevels: the levels verify accepts read back as written, and
// none and all select what they say.
func TestReadDataLevels(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Subset
	}{{"all", ReadAll}, {"none", ReadNone}, {"2/7", Subset{2, 7}}} {
		got, err := ParseSubset(tt.in)
		if err != nil || got != tt.want || got.String() != tt.in {
			t.Errorf("ParseSubset(%q) = %v (%q), %v; want %v", tt.in, got, got.String(), err, tt.want)
		}
	}
	sum := hashOf([]byte("x"))
	if !ReadAll.Contains(sum) || ReadNone.Contains(sum) {
		t.Error("ReadAll must contain every chunk and ReadNone none")
	}
}
