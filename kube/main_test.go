package kube

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts (the Reporter's, the HTTP client's) must
// be gone when the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
