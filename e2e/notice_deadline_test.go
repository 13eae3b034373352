package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// noticeServer is a url: notice source the test controls: 204 until
// answer is set, then what answer returns (a status and a body).
type noticeServer struct {
	srv    *httptest.Server
	answer atomic.Pointer[func() (int, string)]
	calls  atomic.Int64
}

func newNoticeServer(t *testing.T) *noticeServer {
	s := &noticeServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		f := s.answer.Load()
		if f == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		code, body := (*f)()
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *noticeServer) set(f func() (int, string)) { s.answer.Store(&f) }

// deadlineIn is a notice whose deadline is d from now (negative: past).
func deadlineIn(d time.Duration) func() (int, string) {
	return func() (int, string) {
		return http.StatusOK, fmt.Sprintf(`{"deadline": %q}`, time.Now().Add(d).UTC().Format(time.RFC3339))
	}
}

// TestNoticeDeadlineNotBelieved: a notice whose deadline is past or a
// second away (read late, or a node clock behind the cloud's) is said
// (supervisor.notice_deadline_unusable) and the stop runs on --grace: the
// trainer's 0.5 s SIGTERM save is made and committed and lifeboat exits
// 143. On the code before, the budget went negative and the trainer was
// SIGKILLed within milliseconds: exit 137, the save lost. A deadline years
// away is clamped to --grace as before.
func TestNoticeDeadlineNotBelieved(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		unusable bool
	}{
		{"past", -6 * time.Second, true},
		{"one second away", time.Second, true},
		{"years away", 5 * 365 * 24 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newNoticeServer(t)
			root := t.TempDir()
			url := "file://" + filepath.Join(root, "store")
			tlog := filepath.Join(root, "tlog")
			tr := startTrainer(t, []string{"TRAINER_EVERY=100000", "TRAINER_SAVE_SECONDS=0.5"},
				"run", "--store", url, "--dir", filepath.Join(root, "pod"), "--grace", "20s",
				"--notices", "url:"+srv.srv.URL, "--notice-interval", "100ms", "--termination-log", tlog,
				"--", "python3", "-u", "testdata/trainer.py", "backup")
			if e := tr.next(t); e.Event != "fresh" {
				t.Fatalf("first event %+v", e)
			}
			srv.set(deadlineIn(tc.deadline))
			if e := tr.next(t); e.Event != "terminated" {
				t.Fatalf("after the notice: %+v, want the trainer's TERM handler to finish its save", e)
			}
			if code := tr.wait(); code != 143 {
				t.Fatalf("exit %d, want 143; log:\n%s", code, tr.stderr.String())
			}
			if latestComplete(lsJSON(t, nil, url)) < 0 {
				t.Errorf("the save made on the notice was not committed; log:\n%s", tr.stderr.String())
			}
			log := tr.stderr.String()
			if got := strings.Contains(log, `"msg":"supervisor.notice_deadline_unusable"`); got != tc.unusable {
				t.Errorf("supervisor.notice_deadline_unusable logged: %v, want %v; log:\n%s", got, tc.unusable, log)
			}
			if !strings.Contains(log, `"budget":"grace 20s = trainer`) {
				t.Errorf("the stop did not run on the 20s grace; log:\n%s", log)
			}
			if strings.Contains(log, "supervisor.grace_expired") {
				t.Errorf("the trainer was killed at a deadline; log:\n%s", log)
			}
		})
	}
}

// TestNoticeSignalUSR1EndsAsPreemption: with --notice-signal USR1 (the
// trainer saves now and keeps training) the trainer gets TERM half way
// through its budget, saves again and exits on its own; lifeboat exits
// 143 with the second save committed. On the code before, lifeboat never
// sent TERM, SIGKILLed the trainer at the deadline and exited 137, which
// every shipped Job counts as a failure.
func TestNoticeSignalUSR1EndsAsPreemption(t *testing.T) {
	srv := newNoticeServer(t)
	root := t.TempDir()
	url := "file://" + filepath.Join(root, "store")
	tr := startTrainer(t, []string{"TRAINER_EVERY=100000", "TRAINER_ON_USR1=save"},
		"run", "--store", url, "--dir", filepath.Join(root, "pod"), "--grace", "8s",
		"--notices", "url:"+srv.srv.URL, "--notice-interval", "100ms", "--notice-signal", "USR1",
		"--", "python3", "-u", "testdata/trainer.py", "backup")
	if e := tr.next(t); e.Event != "fresh" {
		t.Fatalf("first event %+v", e)
	}
	srv.set(deadlineIn(time.Hour))
	if e := tr.next(t); e.Event != "saved_now" {
		t.Fatalf("after the notice: %+v, want the trainer's USR1 save", e)
	}
	e := tr.next(t)
	if e.Event != "terminated" {
		t.Fatalf("after the USR1 save: %+v, want the TERM that follows it", e)
	}
	if code := tr.wait(); code != 143 {
		t.Fatalf("exit %d, want 143 (a preemption); log:\n%s", code, tr.stderr.String())
	}
	log := tr.stderr.String()
	for _, want := range []string{`"msg":"supervisor.stop_after_notice","signal":"TERM","delivered":"TERM"`} {
		if !strings.Contains(log, want) {
			t.Errorf("no %s in the log:\n%s", want, log)
		}
	}
	if strings.Contains(log, "supervisor.grace_expired") {
		t.Errorf("the trainer was killed although it exits on TERM; log:\n%s", log)
	}
	// The TERM save, not only the USR1 one, is what the next pod resumes.
	next := startTrainer(t, []string{"TRAINER_EVERY=100000"}, "run", "--store", url, "--dir", filepath.Join(root, "next"),
		"--", "python3", "-u", "testdata/trainer.py", "backup")
	if r := next.next(t); r.Event != "resumed" || r.Step != e.Step || !r.Verified {
		t.Errorf("the next run: %+v, want resumed at step %d, verified", r, e.Step)
	}
	next.signal(syscall.SIGTERM)
	next.wait()
}

// TestNoticeWithdrawnAndServerErrors: a source that fails with 500 is
// logged with its status and body; a notice withdrawn after it was seen
// (the endpoint back to 404) still stops the job, as README says: the
// trainer has been told to stop, and a machine that may go away is not
// worth the risk.
func TestNoticeWithdrawnAndServerErrors(t *testing.T) {
	srv := newNoticeServer(t)
	srv.set(func() (int, string) { return http.StatusInternalServerError, "metadata backend down" })
	root := t.TempDir()
	url := "file://" + filepath.Join(root, "store")
	tr := startTrainer(t, []string{"TRAINER_EVERY=100000"},
		"run", "--store", url, "--dir", filepath.Join(root, "pod"),
		"--notices", "url:"+srv.srv.URL, "--notice-interval", "100ms",
		"--", "python3", "-u", "testdata/trainer.py", "backup")
	if e := tr.next(t); e.Event != "fresh" {
		t.Fatalf("first event %+v", e)
	}
	waitFor(t, tr.lb, func() bool { return strings.Contains(tr.stderr.String(), `"msg":"notice.unavailable"`) })
	if log := tr.stderr.String(); !strings.Contains(log, "500 Internal Server Error") || !strings.Contains(log, "metadata backend down") {
		t.Errorf("the 500 is not logged with its status and body:\n%s", log)
	}
	var once atomic.Bool
	srv.set(func() (int, string) {
		if once.CompareAndSwap(false, true) {
			return deadlineIn(time.Hour)()
		}
		return http.StatusNotFound, ""
	})
	if e := tr.next(t); e.Event != "terminated" {
		t.Fatalf("after the notice: %+v, want the trainer's TERM handler", e)
	}
	if code := tr.wait(); code != 143 {
		t.Errorf("exit %d, want 143", code)
	}
	if _, err := os.Stat(filepath.Join(root, "pod", "backup", "model.pdparams")); err != nil {
		t.Errorf("no save on the notice: %v", err)
	}
}
