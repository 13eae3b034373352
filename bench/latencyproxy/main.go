// Command latencyproxy forwards TCP connections to an upstream address and
// delays every byte by a fixed one-way latency in each direction, so that a
// local server looks like a remote one (round trip = 2 x -delay). It is a
// delay line, not a bandwidth limit: bytes are buffered while they wait, as
// on a long fat link with large TCP windows. bench/latency.sh uses it to
// put MinIO "far away".
//
//	latencyproxy -listen 127.0.0.1:0 -upstream 127.0.0.1:9000 -delay 10ms
//
// It prints the address it listens on as its first line of output.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := flag.String("upstream", "", "address to forward to (required)")
	delay := flag.Duration("delay", 10*time.Millisecond, "one-way delay added in each direction")
	flag.Parse()
	if *upstream == "" {
		fmt.Fprintln(os.Stderr, "latencyproxy: -upstream is required")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("latencyproxy: %v", err)
	}
	fmt.Println(ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatalf("latencyproxy: %v", err)
		}
		go serve(c, *upstream, *delay)
	}
}

// serve joins c to a new connection to upstream through two delay lines.
func serve(c net.Conn, upstream string, delay time.Duration) {
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		log.Printf("latencyproxy: dial %s: %v", upstream, err)
		c.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { delayLine(u, c, delay); done <- struct{}{} }()
	go func() { delayLine(c, u, delay); done <- struct{}{} }()
	<-done
	c.Close()
	u.Close()
	<-done
}

type piece struct {
	at  time.Time
	buf []byte
}

// delayLine copies src to dst, writing each piece read delay after it was
// read. It returns when either side fails or src ends.
func delayLine(dst io.Writer, src io.Reader, delay time.Duration) {
	pieces := make(chan piece, 4096)
	go func() {
		defer close(pieces)
		for {
			buf := make([]byte, 256<<10)
			n, err := src.Read(buf)
			if n > 0 {
				pieces <- piece{at: time.Now().Add(delay), buf: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for p := range pieces {
		time.Sleep(time.Until(p.at))
		if _, err := dst.Write(p.buf); err != nil {
			// Drain so the reader is not left blocked on a full channel.
			for range pieces {
			}
			return
		}
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
