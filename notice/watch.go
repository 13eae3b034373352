package notice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
)

// Kinds of Notice.
const (
	// KindPreemption: the machine is going away; stop.
	KindPreemption = "preemption"
	// KindRebalance: AWS's rebalance recommendation, the machine is at
	// elevated risk of interruption but not going away yet. It usually
	// comes minutes before an interruption notice, or without one.
	KindRebalance = "rebalance"
)

// Notice is a warning from a cloud about the machine.
type Notice struct {
	// Kind is KindPreemption or KindRebalance.
	Kind string
	// Source is SourceAWS, SourceGCP or SourceURL.
	Source string
	// Deadline is when the machine goes away; zero if unknown and for a
	// rebalance recommendation.
	Deadline time.Time
	// Issued is when the source says it issued the notice (AWS's
	// noticeTime of a rebalance recommendation); zero if it does not say.
	Issued time.Time
	// Detail is what the source said, such as AWS's action ("terminate").
	Detail string
}

// maxBody bounds how much of a response is read.
const maxBody = 64 << 10

// retryMax is how many times go-retryablehttp retries one request (on
// connection errors, timeouts, 429 and 5xx) before the check fails and the
// source waits Interval.
const retryMax = 2

// Watch checks cfg and starts one goroutine per source. Each sends on the
// returned channel at most one notice of each kind, the first it sees: a
// rebalance recommendation (aws only) before its preemption notice, and
// returns after the preemption notice. The channel's buffer holds two per
// source so that no send ever blocks. The channel is closed after ctx
// ends, once every goroutine has returned. With no sources the channel
// only closes when ctx ends.
func Watch(ctx context.Context, cfg Config) (<-chan Notice, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	out := make(chan Notice, 2*len(cfg.Sources))
	var wg sync.WaitGroup
	for _, src := range cfg.Sources {
		w := newWatcher(cfg, src, out)
		wg.Go(func() { w.run(ctx) })
	}
	go func() {
		<-ctx.Done()
		wg.Wait()
		close(out)
	}()
	return out, nil
}

// checkFunc asks a source once. It returns the notices it found, in the
// order they are to be sent, each kind at most once over the source's
// life; wait tells the loop whether to wait Interval before the next check
// (a long poll that returned with news need not). A check may return
// notices and an error together (one of the things it asks failed).
type checkFunc func(ctx context.Context) (ns []Notice, wait bool, err error)

type watcher struct {
	cfg    Config
	name   string // the source, redacted
	log    *slog.Logger
	out    chan<- Notice
	check  checkFunc
	closer func() // closes idle connections when the goroutine ends
	warned bool
}

func newWatcher(cfg Config, src string, out chan<- Notice) *watcher {
	w := &watcher{cfg: cfg, name: redactSource(src), out: out}
	w.log = cfg.Log.With("source", w.name)
	switch {
	case src == SourceAWS:
		c := newClient(cfg, cfg.RequestTimeout, false)
		w.closer = c.HTTPClient.CloseIdleConnections
		w.check = (&awsSource{cfg: cfg, client: c}).check
	case src == SourceGCP:
		c := newClient(cfg, cfg.WaitTimeout+cfg.RequestTimeout, false)
		w.closer = c.HTTPClient.CloseIdleConnections
		w.check = (&gcpSource{cfg: cfg, client: c, etag: "NONE"}).check
	default:
		c := newClient(cfg, cfg.RequestTimeout, true)
		w.closer = c.HTTPClient.CloseIdleConnections
		w.check = (&urlSource{cfg: cfg, client: c, url: strings.TrimPrefix(src, SourceURL+":")}).check
	}
	return w
}

// run checks until a notice arrives or ctx ends.
func (w *watcher) run(ctx context.Context) {
	defer w.closer()
	w.log.Debug("notice.watch", "interval", w.cfg.Interval.String())
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ns, wait, err := w.check(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.failed(err)
			wait = true
		}
		for _, n := range ns {
			if n.Kind != KindPreemption {
				w.out <- n // never blocks: the buffer holds one of each kind per source
				continue
			}
			args := []any{"detail", n.Detail}
			if !n.Deadline.IsZero() {
				// RFC 3339 in UTC, to the millisecond, as every log line's deadline.
				args = append([]any{"deadline", n.Deadline.UTC().Format("2006-01-02T15:04:05.999Z07:00")}, args...)
			}
			w.log.Debug("notice.preempted", args...)
			w.out <- n
			return
		}
		if wait {
			t.Reset(w.cfg.Interval)
		} else {
			t.Reset(0)
		}
	}
}

// failed logs err: at warn the first time, at debug after that, so that an
// absent metadata server (not on that cloud, or blocked) says so once.
func (w *watcher) failed(err error) {
	if !w.warned {
		w.warned = true
		w.log.Warn("notice.unavailable", "err", err,
			"hint", "lifeboat keeps trying; later failures of this source are logged at debug")
		return
	}
	w.log.Debug("notice.unavailable", "err", err)
}

// newClient returns a go-retryablehttp client whose every attempt is bounded
// by timeout. Metadata servers are never reached through a proxy; url
// sources honour HTTP_PROXY and NO_PROXY.
func newClient(cfg Config, timeout time.Duration, proxy bool) *retryablehttp.Client {
	tr := cleanhttp.DefaultPooledTransport()
	if !proxy {
		tr.Proxy = nil
	}
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: tr, Timeout: timeout}
	c.Logger = nil // the watcher logs failures itself, once at warn
	c.RetryMax = retryMax
	c.RetryWaitMin = max(cfg.Interval/10, time.Millisecond)
	c.RetryWaitMax = cfg.Interval
	c.CheckRetry = retryablehttp.DefaultRetryPolicy
	c.Backoff = retryablehttp.DefaultBackoff
	// With its retries spent on a 5xx, the last answer is returned as it
	// is, so that the log says its status and body, not only "giving up".
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler
	return c
}

// do sends one request through client (which retries it) and returns the
// status, the header and up to maxBody bytes of the body.
func do(ctx context.Context, client *retryablehttp.Client, method, url string, header http.Header) (status int, h http.Header, body []byte, err error) {
	req, err := retryablehttp.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: read body: %w", method, redactURL(url), err)
	}
	return resp.StatusCode, resp.Header, body, nil
}

// errStatus describes an answer a source does not expect.
func errStatus(what string, status int, body []byte) error {
	return fmt.Errorf("%s: unexpected HTTP status %d %s (body %q)", what, status, http.StatusText(status), snippet(body))
}

func snippet(b []byte) string {
	const n = 120
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

var errNoToken = errors.New("empty token")
