package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// TestStoreOutage: the store goes away for 60 s in the middle of training
// (20 s refusing connections as a stopped server does, 20 s resetting
// them, 20 s answering 503), then comes back. The trainer keeps training, lifeboat keeps running and logging,
// uploads resume, a later checkpoint is committed, and the preemption at
// the end commits the last one: nothing is lost.
func TestStoreOutage(t *testing.T) {
	m := testenv.RequireMinIO(t)
	u, err := url.Parse(m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, u.Host)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	store := "s3://lifeboat-outage-" + hex.EncodeToString(b) + "/job"
	env := []string{"AWS_ENDPOINT_URL=" + proxy.URL(), "AWS_ACCESS_KEY_ID=" + m.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1", "LIFEBOAT_CREATE_BUCKET=true", "TRAINER_EVERY=50"}
	dir := t.TempDir()
	tr := startTrainer(t, env, "run", "--store", store, "--dir", dir, "--settle", "100ms", "--scan-interval", "100ms",
		"--keep", "0", "--", "python3", "-u", "testdata/trainer.py", "dirs")
	committed := func() int64 { return latestComplete(lsJSON(t, env, store)) }
	if e := tr.next(t); e.Event != "fresh" {
		t.Fatalf("first event %+v", e)
	}
	for committed() < 0 {
		tr.next(t)
	}
	before := committed()

	// The outage: refused for 20 s, reset for 20 s, 503 for 20 s.
	proxy.Stop()
	start := time.Now()
	outageEnd := start.Add(60 * time.Second)
	phase := "refused"
	var savedDuring, lastSaved int64
	for time.Now().Before(outageEnd) {
		switch el := time.Since(start); {
		case phase == "refused" && el > 20*time.Second:
			phase = "reset"
			proxy.Set(testenv.Reset)
			proxy.Start(t)
		case phase == "reset" && el > 40*time.Second:
			phase = "503"
			proxy.Set(testenv.Unavailable)
		}
		if e := tr.next(t); e.Event == "saved" {
			savedDuring, lastSaved = e.Step, e.Step
		}
		if !tr.alive() {
			t.Fatalf("lifeboat exited during the outage; stderr:\n%s", tail(tr.stderr.String()))
		}
	}
	if savedDuring == 0 {
		t.Fatalf("the trainer saved nothing during the outage: it must keep training")
	}
	proxy.Set(testenv.Forward)
	// Uploads resume: a checkpoint saved after the outage began gets committed.
	for deadline := time.Now().Add(hangLimit * 3); committed() <= before; {
		select {
		case e := <-tr.events:
			if e.Event == "saved" {
				lastSaved = e.Step
			}
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no commit after the store came back (latest %d); stderr:\n%s", committed(), tail(tr.stderr.String()))
		}
	}
	tr.signal(syscall.SIGTERM)
	var termStep int64 = -1
	for e := range tr.events {
		switch e.Event {
		case "terminated":
			termStep = e.Step
		case "saved":
			lastSaved = e.Step
		}
	}
	if code := tr.wait(); code != 143 {
		t.Fatalf("exit %d, want 143; stderr:\n%s", code, tail(tr.stderr.String()))
	}
	// The newest checkpoint the trainer saved is the latest: the final flush
	// commits it if the background uploads had not yet.
	if latest := committed(); latest != lastSaved || latest <= before || termStep < latest {
		t.Errorf("latest committed step %d after the preemption; want the trainer's last save %d (> %d, saved during the outage up to %d, TERM at %d)",
			latest, lastSaved, before, savedDuring, termStep)
	}
	s := tr.stderr.String()
	if !strings.Contains(s, `"msg":"checkpoint.upload_failed"`) {
		t.Errorf("no checkpoint.upload_failed in the log during the outage")
	}
}
