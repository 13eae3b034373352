package e2e

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// startAWSMock starts AWS's amazon-ec2-metadata-mock on addr, requiring
// IMDSv2 tokens, with a rebalance recommendation 1s and a spot
// interruption notice 4s after it starts; the notice's time is spotTime.
// extra are more of the mock's flags. The 3 s between them are 60 of
// lifeboat's polls: a poll late by a second on a busy machine still sees
// the recommendation alone, so the trainer gets its two USR1s apart and
// not merged into one pending signal.
func startAWSMock(t *testing.T, bin, addr string, spotTime time.Time, extra ...string) testenv.EC2Mock {
	t.Helper()
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"spot", "--imdsv2", "--action", "terminate",
		"--time", spotTime.Format(time.RFC3339), "--rebalance-delay-sec", "1", "--mock-delay-sec", "4"}
	return testenv.StartEC2Mock(t, bin, port, append(args, extra...)...)
}

// trainerReady waits for the recording trainer to be ready and, in plain
// mode, has its process group killed when the test ends, so that a failed
// test does not leave it running and holding lifeboat's output open. (As
// PID 1, lifeboat's death ends its namespace.)
func trainerReady(t *testing.T, p *lb, mode, out string) {
	t.Helper()
	waitFile(t, p, out+".ready")
	if mode != "plain" {
		return
	}
	b, err := os.ReadFile(out + ".ready")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		t.Fatalf("ready file %q", b)
	}
	pgid, err := strconv.Atoi(f[1])
	if err != nil || pgid <= 1 || pgid == syscall.Getpgrp() {
		t.Fatalf("ready file %q: the trainer is not in a process group of its own", b)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
}

// logRecords parses lifeboat's JSON log lines.
func logRecords(stderr string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// indexes returns the positions of the records with message msg.
func indexes(recs []map[string]any, msg string) []int {
	var out []int
	for i, r := range recs {
		if r["msg"] == msg {
			out = append(out, i)
		}
	}
	return out
}

// checkNoticeLog checks the log of a run that saw the mock's rebalance
// recommendation and then its interruption notice: the recommendation was
// logged (WARN, with what lifeboat did about it) before anything stopped,
// and the one stop was the interruption notice, with the mock's deadline.
func checkNoticeLog(t *testing.T, stderr string, signal string, spotTime time.Time) {
	t.Helper()
	recs := logRecords(stderr)
	rebalance := indexes(recs, "notice.rebalance_recommendation")
	notices := indexes(recs, "supervisor.preemption_notice")
	stops := indexes(recs, "supervisor.stopping")
	if len(rebalance) != 1 || len(notices) != 1 || len(stops) < 1 {
		t.Fatalf("want one notice.rebalance_recommendation, one supervisor.preemption_notice and a supervisor.stopping; log:\n%s", stderr)
	}
	r := recs[rebalance[0]]
	if r["level"] != "WARN" || r["source"] != "aws" || r["signal"] != signal || r["notice_time"] == "" {
		t.Errorf("rebalance logged as %v, want WARN, source aws, signal %s and its notice_time", r, signal)
	}
	if rebalance[0] > stops[0] || rebalance[0] > notices[0] {
		t.Errorf("the rebalance recommendation was logged after the stop began; log:\n%s", stderr)
	}
	n := recs[notices[0]]
	if n["source"] != "aws" || n["detail"] != "terminate" || n["deadline"] != spotTime.Format(time.RFC3339) {
		t.Errorf("interruption logged as %v, want source aws, detail terminate, deadline %s", n, spotTime.Format(time.RFC3339))
	}
	if reason := recs[stops[0]]["reason"]; reason != "aws preemption notice" {
		t.Errorf("the first stop's reason is %v, want the interruption notice (the rebalance recommendation must not stop); log:\n%s", reason, stderr)
	}
}

// TestAWSNoticesFromTheMock runs `lifeboat run --notices aws` against AWS's
// own amazon-ec2-metadata-mock, found through
// AWS_EC2_METADATA_SERVICE_ENDPOINT as the AWS SDKs find it, with a trainer
// that records every signal. A rebalance recommendation is logged and
// counted and stops nothing; with --notice-on-rebalance the trainer also
// gets --notice-signal and keeps running. The interruption notice that
// follows stops the trainer as a preemption (exit 143) with the mock's
// deadline logged. Lifeboat starts before the mock, so the trainer is
// ready before the first notice and the mock's clock starts then.
func TestAWSNoticesFromTheMock(t *testing.T) {
	bin := testenv.RequireEC2Mock(t)
	spotTime := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)

	t.Run("rebalance logged", func(t *testing.T) {
		addr := freeAddr(t)
		out := filepath.Join(t.TempDir(), "rec")
		p := startEnv(t, "plain", []string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=http://" + addr},
			"run", "--notices", "aws", "--notice-interval", "50ms", "--grace", "1m",
			"--", childBin, "record", out, "TERM")
		trainerReady(t, p, "plain", out)
		startAWSMock(t, bin, addr, spotTime)
		if code := p.wait(); code != 143 {
			t.Fatalf("exit %d, want 143 (stopped by the interruption notice); stderr:\n%s", code, p.stderr.String())
		}
		if got := waitLines(t, out, 1); !slices.Equal(got, []string{"TERM"}) {
			t.Errorf("the trainer received %v, want only the TERM of the interruption notice", got)
		}
		checkNoticeLog(t, p.stderr.String(), "none", spotTime)
	})

	// A recommendation issued before lifeboat started (the node was
	// already at risk when the pod was placed) is logged and counted, but
	// the trainer, just resumed, is not asked to save: it may not even
	// handle the signal yet. The first USR1 it sees is the interruption's.
	t.Run("rebalance from before the start", func(t *testing.T) {
		addr := freeAddr(t)
		out := filepath.Join(t.TempDir(), "rec")
		p := startEnv(t, "plain", []string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=http://" + addr},
			"run", "--notices", "aws", "--notice-on-rebalance", "--notice-signal", "USR1", "--notice-interval", "50ms",
			"--grace", "1m", "--", childBin, "record", out, "USR1")
		trainerReady(t, p, "plain", out)
		startAWSMock(t, bin, addr, spotTime, "--rebalance-rec-time", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		if code := p.wait(); code != 143 {
			t.Fatalf("exit %d, want 143; stderr:\n%s", code, p.stderr.String())
		}
		if got := waitLines(t, out, 1); !slices.Equal(got, []string{"USR1"}) {
			t.Errorf("the trainer received %v, want only the USR1 of the interruption notice", got)
		}
		checkNoticeLog(t, p.stderr.String(), "none", spotTime)
	})

	for _, mode := range modes {
		t.Run("save on rebalance/"+mode, func(t *testing.T) {
			addr := freeAddr(t)
			out := filepath.Join(t.TempDir(), "rec")
			p := startEnv(t, mode, []string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=http://" + addr, "LIFEBOAT_NOTICE_ON_REBALANCE=true"},
				"run", "--notices", "aws", "--notice-signal", "USR1", "--notice-interval", "50ms",
				"--grace", "1m", "--metrics-addr", "127.0.0.1:0", "--", childBin, "record", out, "TERM")
			trainerReady(t, p, mode, out)
			metricsAddr := listenAddr(t, p)
			startAWSMock(t, bin, addr, spotTime)
			// USR1 for the rebalance recommendation, then USR1 for the
			// interruption notice: the trainer saved early and still runs.
			if got := waitLines(t, out, 2); !slices.Equal(got, []string{"USR1", "USR1"}) {
				t.Fatalf("the trainer received %v, want USR1 twice; stderr:\n%s", got, p.stderr.String())
			}
			waitFor(t, p, func() bool { return strings.Contains(p.stderr.String(), `"msg":"supervisor.stopping"`) })
			if !p.alive() {
				t.Fatalf("lifeboat exited before the grace period ended; stderr:\n%s", p.stderr.String())
			}
			for name, want := range map[string]float64{
				`lifeboat_rebalance_recommendations_total{source="aws"}`: 1,
				`lifeboat_preemption_notices_total{source="aws"}`:        1,
			} {
				if v := scrape(t, metricsAddr, name); v != want {
					t.Errorf("%s = %v, want %v", name, v, want)
				}
			}
			p.signal(syscall.SIGTERM) // the kubelet's
			if code := p.wait(); code != 143 {
				t.Errorf("exit %d, want 143; stderr:\n%s", code, p.stderr.String())
			}
			if got := waitLines(t, out, 3); !slices.Equal(got, []string{"USR1", "USR1", "TERM"}) {
				t.Errorf("the trainer received %v, want USR1, USR1, TERM", got)
			}
			checkNoticeLog(t, p.stderr.String(), "USR1", spotTime)
		})
	}
}

// TestNoticeConfigErrors: settings that cannot work are refused with exit
// 2 and a line naming the flag or variable, before the trainer starts.
func TestNoticeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"rebalance with a stop signal", nil, []string{"--notices", "aws", "--notice-on-rebalance"},
			[]string{"--notice-on-rebalance (LIFEBOAT_NOTICE_ON_REBALANCE)", "--notice-signal (LIFEBOAT_NOTICE_SIGNAL)"}},
		{"rebalance with a chosen stop signal", nil, []string{"--notices", "aws", "--notice-on-rebalance", "--notice-signal", "USR1", "--stop-signals", "TERM,USR1"},
			[]string{"--notice-on-rebalance (LIFEBOAT_NOTICE_ON_REBALANCE)", "--stop-signals (LIFEBOAT_STOP_SIGNALS)"}},
		{"interval", nil, []string{"--notices", "aws", "--notice-interval", "0s"},
			[]string{"--notice-interval (LIFEBOAT_NOTICE_INTERVAL)"}},
		{"imds disabled", []string{"AWS_EC2_METADATA_DISABLED=true"}, []string{"--notices", "aws"},
			[]string{"AWS_EC2_METADATA_DISABLED", "--notices (LIFEBOAT_NOTICES)"}},
		{"gcp host with a scheme", []string{"GCE_METADATA_HOST=http://127.0.0.1:9"}, []string{"--notices", "gcp"},
			[]string{"GCE_METADATA_HOST"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "started")
			args := append(append([]string{"run"}, tc.args...), "--", "touch", marker)
			p := startEnv(t, "plain", append([]string{"LIFEBOAT_NOTICE_ON_REBALANCE="}, tc.env...), args...)
			if code := p.wait(); code != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", code, p.stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(p.stderr.String(), w) {
					t.Errorf("stderr does not name %s:\n%s", w, p.stderr.String())
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the trainer was started despite the configuration error")
			}
		})
	}
}
