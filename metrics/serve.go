package metrics

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// shutdownWait bounds how long Serve waits for scrapes in flight when ctx
// ends before it closes their connections.
const shutdownWait = 5 * time.Second

// Serve listens on addr (host:port; port 0 picks a free one) and serves
// m.Handler there until ctx ends, then shuts the server down gracefully. It
// returns once listening, with the bound address; the error, when it cannot
// listen, names the address (the caller names where it came from). Later
// serving errors are logged to log (nil: discarded).
func Serve(ctx context.Context, addr string, m *Metrics, log *slog.Logger) (net.Addr, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		return nil, errors.New("metrics: Serve needs a *Metrics from metrics.New")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("metrics: address %q is not host:port (%v); use for example :9090 or 127.0.0.1:9090", addr, err)
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: cannot listen on %q: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           m.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          stdlog.New(httpErrorLog{log}, "", 0),
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics.serve", "addr", l.Addr().String(), "err", err)
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
		case <-served:
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("metrics.shutdown", "addr", l.Addr().String(), "err", err)
			_ = srv.Close()
		}
		<-served
	}()
	log.Info("metrics.listening", "addr", l.Addr().String())
	return l.Addr(), nil
}

// httpErrorLog turns the HTTP server's own complaints (a client's malformed
// request, a TLS handshake) into metrics.http_error lines at Debug.
type httpErrorLog struct{ log *slog.Logger }

func (h httpErrorLog) Write(p []byte) (int, error) {
	h.log.Debug("metrics.http_error", "err", strings.TrimSpace(string(p)))
	return len(p), nil
}
