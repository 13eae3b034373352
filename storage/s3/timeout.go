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
)

// The clocks of a request and what happens when one runs out: see the
// package doc ("Timeouts").

// Phase is what a request was waiting for when its clock ran out.
type Phase int

const (
	PhaseConnect Phase = iota // the TCP connect, name lookup included
	PhaseTLS                  // the TLS handshake
	PhaseHeaders              // the response's headers
	PhaseStall                // a read or write that moved no byte
	PhaseOpen                 // the opening check, start to end
)

// Field is the setting of Config whose clock ran out in p (for PhaseOpen,
// ConnectTimeout plus ResponseTimeout; ResponseTimeout is the one to
// raise).
func (p Phase) Field() Field {
	switch p {
	case PhaseConnect, PhaseTLS:
		return FieldConnectTimeout
	case PhaseStall:
		return FieldStallTimeout
	}
	return FieldResponseTimeout
}

// TimeoutError is a store that did not answer in time. Its text names the
// endpoint and the setting to change (Phase.Field), never a credential; it
// is a net.Error whose Timeout is true, and it is transient: the server may
// answer later.
type TimeoutError struct {
	Endpoint string
	Phase    Phase
	Limit    time.Duration
	err      error // what the transport reported; nil for PhaseOpen
}

// Problem is what happened, naming the endpoint and the limit but no
// setting: the part of the message before what to do.
func (e *TimeoutError) Problem() string {
	switch e.Phase {
	case PhaseConnect:
		return fmt.Sprintf("the store at %s did not accept a connection within %s", e.Endpoint, e.Limit)
	case PhaseTLS:
		return fmt.Sprintf("the store at %s did not finish the TLS handshake within %s", e.Endpoint, e.Limit)
	case PhaseHeaders:
		return fmt.Sprintf("the store at %s accepted the connection but did not answer within %s", e.Endpoint, e.Limit)
	case PhaseStall:
		return fmt.Sprintf("a transfer with the store at %s moved no byte for %s", e.Endpoint, e.Limit)
	}
	return fmt.Sprintf("the store at %s did not answer within %s", e.Endpoint, e.Limit)
}

func (e *TimeoutError) Error() string {
	switch e.Phase {
	case PhaseConnect:
		return fmt.Sprintf("%s; check %s and that the server is running and reachable, or raise %s", e.Problem(), FieldEndpoint, e.Phase.Field())
	case PhaseTLS:
		return fmt.Sprintf("%s; check %s, its scheme and port, or raise %s", e.Problem(), FieldEndpoint, e.Phase.Field())
	case PhaseStall:
		return fmt.Sprintf("%s; check %s and the network path to it, or raise %s", e.Problem(), FieldEndpoint, e.Phase.Field())
	case PhaseOpen:
		return fmt.Sprintf("%s (%s plus %s); check %s and the server's health, or raise %s", e.Problem(), FieldConnectTimeout, FieldResponseTimeout, FieldEndpoint, e.Phase.Field())
	}
	return fmt.Sprintf("%s; check %s and the server's health, or raise %s", e.Problem(), FieldEndpoint, e.Phase.Field())
}

func (e *TimeoutError) Unwrap() error   { return e.err }
func (e *TimeoutError) Timeout() bool   { return true }
func (e *TimeoutError) Temporary() bool { return true }

// classify returns err as a TimeoutError when it is one of the transport's
// clocks running out, or nil. The caller checks first that the request's
// own context is not done: a context's deadline is a net.Error too.
func classify(cfg Config, err error) *TimeoutError {
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		return nil
	}
	var te *TimeoutError
	if errors.As(err, &te) {
		return te
	}
	te = &TimeoutError{Endpoint: cfg.Endpoint, Phase: PhaseStall, Limit: cfg.StallTimeout, err: err}
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		te.Phase, te.Limit = PhaseConnect, cfg.ConnectTimeout
	case strings.Contains(err.Error(), "TLS handshake timeout"):
		te.Phase, te.Limit = PhaseTLS, cfg.ConnectTimeout
	case strings.Contains(err.Error(), "timeout awaiting response headers"):
		te.Phase, te.Limit = PhaseHeaders, cfg.ResponseTimeout
	}
	return te
}

// timeoutTransport is the store's RoundTripper. A request whose clock ran
// out ends its store call with the TimeoutError as the cause.
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
// call whose clock runs out ends it early, with the TimeoutError as its
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
	ctx, stop := context.WithTimeoutCause(ctx, limit, &TimeoutError{Endpoint: s.cfg.Endpoint, Phase: PhaseOpen, Limit: limit})
	ctx, end := call(ctx)
	return ctx, func(cause error) { end(cause); stop() }
}

// failed is err, or the TimeoutError that ended ctx's call in its place:
// minio-go reports that as the context's cancellation, or wrapped in a
// *url.Error whose URL only repeats the operation.
func failed(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var te *TimeoutError
	if errors.As(err, &te) || errors.As(context.Cause(ctx), &te) {
		return te
	}
	return err
}

// getBody is a Get's response body: reading it names a stall as the
// TimeoutError it is, and closing it ends the Get's call.
type getBody struct {
	io.ReadCloser
	ctx context.Context
	end context.CancelCauseFunc
	cfg Config
	key string
}

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
