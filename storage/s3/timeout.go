package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// The clocks of a request and what happens when one runs out: see the
// package doc ("Timeouts").

// phase is what a request was waiting for when its clock ran out.
type phase int

const (
	phaseConnect phase = iota // the TCP connect, name lookup included
	phaseTLS                  // the TLS handshake
	phaseHeaders              // the response's headers
	phaseStall                // a read or write that moved no byte
	phaseOpen                 // the opening check, start to end
)

// timeoutError is a store that did not answer in time. Its text names the
// endpoint and the flag to change, never a credential; it is a net.Error
// whose Timeout is true, and it is transient: the server may answer later.
type timeoutError struct {
	endpoint string
	phase    phase
	limit    time.Duration
	err      error // what the transport reported; nil for phaseOpen
}

func (e *timeoutError) Error() string {
	const check = "check --s3-endpoint (AWS_ENDPOINT_URL)"
	switch e.phase {
	case phaseConnect:
		return fmt.Sprintf("the store at %s did not accept a connection within %s; %s and that the server is running and reachable, or raise --s3-connect-timeout (LIFEBOAT_S3_CONNECT_TIMEOUT)", e.endpoint, e.limit, check)
	case phaseTLS:
		return fmt.Sprintf("the store at %s did not finish the TLS handshake within %s; %s, its scheme and port, or raise --s3-connect-timeout (LIFEBOAT_S3_CONNECT_TIMEOUT)", e.endpoint, e.limit, check)
	case phaseHeaders:
		return fmt.Sprintf("the store at %s accepted the connection but did not answer within %s; %s and the server's health, or raise --s3-response-timeout (LIFEBOAT_S3_RESPONSE_TIMEOUT)", e.endpoint, e.limit, check)
	case phaseStall:
		return fmt.Sprintf("a transfer with the store at %s moved no byte for %s; %s and the network path to it, or raise --s3-stall-timeout (LIFEBOAT_S3_STALL_TIMEOUT)", e.endpoint, e.limit, check)
	default:
		return fmt.Sprintf("the store at %s did not answer within %s (--s3-connect-timeout plus --s3-response-timeout); %s and the server's health, or raise --s3-response-timeout (LIFEBOAT_S3_RESPONSE_TIMEOUT)", e.endpoint, e.limit, check)
	}
}

func (e *timeoutError) Unwrap() error   { return e.err }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

// classify returns err as a timeoutError when it is one of the transport's
// clocks running out, or nil. The caller checks first that the request's
// own context is not done: a context's deadline is a net.Error too.
func classify(cfg Config, err error) *timeoutError {
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		return nil
	}
	var te *timeoutError
	if errors.As(err, &te) {
		return te
	}
	te = &timeoutError{endpoint: cfg.Endpoint, phase: phaseStall, limit: cfg.StallTimeout, err: err}
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		te.phase, te.limit = phaseConnect, cfg.ConnectTimeout
	case strings.Contains(err.Error(), "TLS handshake timeout"):
		te.phase, te.limit = phaseTLS, cfg.ConnectTimeout
	case strings.Contains(err.Error(), "timeout awaiting response headers"):
		te.phase, te.limit = phaseHeaders, cfg.ResponseTimeout
	}
	return te
}

// timeoutTransport is the store's RoundTripper. A request whose clock ran
// out ends its store call with the timeoutError as the cause.
type timeoutTransport struct {
	base http.RoundTripper
	cfg  Config
}

func (t *timeoutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil || req.Context().Err() != nil {
		return resp, err
	}
	te := classify(t.cfg, err)
	if te == nil {
		return resp, err
	}
	if end, ok := req.Context().Value(callKey{}).(context.CancelCauseFunc); ok {
		end(te)
	}
	return nil, te
}

// callKey holds a store call's CancelCauseFunc in its context.
type callKey struct{}

// call returns the context of one store call and its end: a request of the
// call whose clock runs out ends it early, with the timeoutError as its
// cause (see failed). end must be called when the call is over.
func call(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	ctx, end := context.WithCancelCause(ctx)
	return context.WithValue(ctx, callKey{}, end), end
}

// openCall is call for a request of the opening check, which also ends
// once ConnectTimeout+ResponseTimeout have passed: however the server
// answers (errors minio-go retries, slowly), the check gives up by then.
func (s *Store) openCall(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	limit := s.cfg.ConnectTimeout + s.cfg.ResponseTimeout
	ctx, stop := context.WithTimeoutCause(ctx, limit, &timeoutError{endpoint: s.cfg.Endpoint, phase: phaseOpen, limit: limit})
	ctx, end := call(ctx)
	return ctx, func(cause error) { end(cause); stop() }
}

// failed is err, or the timeoutError that ended ctx's call in its place:
// minio-go reports that as the context's cancellation, or wrapped in a
// *url.Error whose URL only repeats the operation.
func failed(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var te *timeoutError
	if errors.As(err, &te) || errors.As(context.Cause(ctx), &te) {
		return te
	}
	return err
}

// getBody is a Get's response body: reading it names a stall as the
// timeoutError it is, and closing it ends the Get's call.
type getBody struct {
	io.ReadCloser
	ctx  context.Context
	end  context.CancelCauseFunc
	cfg  Config
	key  string
	sums storage.StoredSums // of the whole object, for a Get of it
}

// StoredSums is what the server said of the object (storage.BodySums).
func (b *getBody) StoredSums() storage.StoredSums { return b.sums }

func (b *getBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.ctx.Err() == nil {
		if te := classify(b.cfg, err); te != nil {
			err = fmt.Errorf("s3: get %s: %w", b.key, te)
		}
	}
	return n, err
}

func (b *getBody) Close() error {
	err := b.ReadCloser.Close()
	b.end(nil)
	return err
}
