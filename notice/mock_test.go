package notice

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// TestAWSAgainstEC2MetadataMock runs the aws source against AWS's own
// amazon-ec2-metadata-mock, found through AWS_EC2_METADATA_SERVICE_ENDPOINT
// as the SDKs find it. The mock requires IMDSv2 tokens (--imdsv2), issues
// a rebalance recommendation after 1s and a spot interruption notice after
// 2s (counted from its start): the rebalance must arrive first, as its own
// kind, and then the interruption as a preemption with the mock's time.
func TestAWSAgainstEC2MetadataMock(t *testing.T) {
	bin := testenv.RequireEC2Mock(t)
	const (
		spotTime      = "2031-02-03T04:05:06Z"
		rebalanceTime = "2031-02-03T04:03:06Z"
	)
	m := testenv.StartEC2Mock(t, bin, 0, "spot", "--imdsv2", "--action", "stop",
		"--time", spotTime, "--rebalance-rec-time", rebalanceTime,
		"--rebalance-delay-sec", "1", "--mock-delay-sec", "2")
	// The mock's process is waited for until the test's cleanup.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	env := map[string]string{EnvAWSEndpoint: m.Endpoint}
	cfg := fast(SourceAWS)
	cfg.Interval = 50 * time.Millisecond
	if err := cfg.ReadEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	cfg.Log = rec.logger()
	ch, stop := start(t, cfg)
	first := recv(t, ch)
	second := recv(t, ch)
	if rest := stop(); len(rest) != 0 {
		t.Errorf("notices after the interruption: %+v", rest)
	}

	wantRebalance := Notice{Kind: KindRebalance, Source: SourceAWS, Issued: mustTime(t, rebalanceTime)}
	if first != wantRebalance {
		t.Errorf("first notice = %+v, want the rebalance recommendation %+v", first, wantRebalance)
	}
	wantSpot := Notice{Kind: KindPreemption, Source: SourceAWS, Deadline: mustTime(t, spotTime), Detail: "stop"}
	if second != wantSpot {
		t.Errorf("second notice = %+v, want the spot interruption %+v", second, wantSpot)
	}
	if n := rec.count("", "notice.unavailable"); n != 0 {
		t.Errorf("the source failed against the mock; log:\n%s", strings.Join(rec.records, "\n"))
	}
	// Every request carried a token the mock had issued: with --imdsv2 it
	// answers one without a token with 401, and logs that.
	log := m.ReadLog()
	if strings.Contains(log, "Token required") || strings.Contains(log, "Invalid token") ||
		strings.Contains(log, "Token has expired") || !strings.Contains(log, "Token validated") {
		t.Errorf("the mock saw requests without a valid IMDSv2 token; its log:\n%s", log)
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
