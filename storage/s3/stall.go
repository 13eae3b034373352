package s3

import (
	"context"
	"net"
	"time"
)

// stallDialer wraps dial so that every connection fails a Read or Write
// that makes no progress for idle: each call pushes the connection's
// deadline idle into the future. A transfer that keeps moving is never cut,
// however long it takes; one that stalls fails within idle, and minio-go's
// retries (or the caller's) take over.
func stallDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), idle time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &stallConn{Conn: c, idle: idle}, nil
	}
}

type stallConn struct {
	net.Conn
	idle time.Duration
}

func (c *stallConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

// Write also pushes the read deadline while it moves bytes: the
// transport's reader waits for the response during the whole upload of a
// request's body, and an upload that keeps moving is no stall, however
// long it takes. (A pending Read takes a new deadline at once.)
func (c *stallConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(p)
	if n > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
	return n, err
}
