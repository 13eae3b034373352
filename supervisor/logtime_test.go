package supervisor

import (
	"slices"
	"testing"
	"time"
)

// TestWithDeadline: a deadline is logged in UTC to the millisecond, and
// left out when it is not known.
func TestWithDeadline(t *testing.T) {
	at := time.Date(2026, 3, 2, 11, 15, 34, 700_400_000, time.FixedZone("CET", 3600))
	tests := []struct {
		name string
		t    time.Time
		want []any
	}{
		{"set", at, []any{"source", "aws", "deadline", "2026-03-02T10:15:34.7Z", "detail", "x"}},
		{"whole second", at.Truncate(time.Second), []any{"source", "aws", "deadline", "2026-03-02T10:15:34Z", "detail", "x"}},
		{"zero", time.Time{}, []any{"source", "aws", "detail", "x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := withDeadline([]any{"source", "aws"}, tc.t, "detail", "x"); !slices.Equal(got, tc.want) {
				t.Errorf("withDeadline = %v, want %v", got, tc.want)
			}
		})
	}
}
