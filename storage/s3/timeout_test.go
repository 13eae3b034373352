package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
)

// hangGuard is how long a call may take before the test calls it hung. It
// guards against hangs only: the calls under test end within a second.
const hangGuard = 30 * time.Second

// unacceptingServer returns the address of a listener whose accept queue
// is full and never drained: the kernel drops further SYNs, so a connect
// hangs as it does to a host that is down or filtered.
func unacceptingServer(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
	// Fill the queue; connects that complete are kept open.
	for range 4 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		// Kernel behaviour, not a missing server: skip even in CI.
		t.Skip("the kernel completed a connect to a full accept queue; cannot make an endpoint that never accepts")
	}
	return addr
}

// within runs fn and returns its error, failing the test if it hangs.
func within(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(hangGuard):
		t.Fatalf("%s hung against a server that does not answer", what)
		return nil
	}
}

// blackHoleConfig is a store at addr with small timeouts.
func blackHoleConfig(addr string) Config {
	return Config{
		Endpoint:        "http://" + addr,
		Bucket:          "ckpt",
		AccessKey:       "AKIDLIFEBOATTEST",
		SecretKey:       "secret-" + rand.Text(),
		BucketLookup:    LookupPath,
		PartSize:        MinPartSize,
		ConnectTimeout:  300 * time.Millisecond,
		ResponseTimeout: 300 * time.Millisecond,
		StallTimeout:    5 * time.Second,
	}
}

// checkTimeout checks that err is a transient timeout (a *TimeoutError)
// that names the endpoint and the setting to change, and shows no
// credential.
func checkTimeout(t *testing.T, what string, err error, cfg Config, field Field) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded against a server that does not answer", what)
	}
	t.Logf("%s: %v", what, err)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("%s: %v is not a timeout (net.Error with Timeout() true)", what, err)
	}
	if storage.IsPermanent(err) {
		t.Errorf("%s: %v is marked permanent; a server that does not answer may answer later", what, err)
	}
	var te *TimeoutError
	if !errors.As(err, &te) || te.Phase.Field() != field || te.Endpoint != cfg.Endpoint {
		t.Errorf("%s: %v is not a *TimeoutError of %s at %s", what, err, field, cfg.Endpoint)
	}
	for _, want := range []string{cfg.Endpoint, string(field), string(FieldEndpoint)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not mention %q", what, err, want)
		}
	}
	if strings.Contains(err.Error(), cfg.SecretKey) || strings.Contains(err.Error(), cfg.AccessKey) {
		t.Errorf("%s: error %q contains a credential", what, err)
	}
}

// TestTimeoutBlackHole: against a server that accepts connections and
// never answers, and one that never accepts them, every call returns a
// timeout error naming the endpoint and the flag to change, once per call:
// minio-go does not retry it ten times over. With or without a region set
// (without one, minio-go asks for the bucket's location first).
func TestTimeoutBlackHole(t *testing.T) {
	for _, server := range []struct {
		name string
		addr func(*testing.T) string
		flag Field
	}{
		{"silent", testenv.SilentServer, FieldResponseTimeout},
		{"unaccepting", unacceptingServer, FieldConnectTimeout},
	} {
		t.Run(server.name, func(t *testing.T) {
			addr := server.addr(t)
			for _, region := range []string{"", "us-east-1"} {
				cfg := blackHoleConfig(addr)
				cfg.Region = region
				ctx := context.Background()
				err := within(t, "New", func() error { _, err := New(ctx, cfg); return err })
				checkTimeout(t, "New (region "+region+")", err, cfg, server.flag)

				s, err := newStore(cfg)
				if err != nil {
					t.Fatal(err)
				}
				calls := []struct {
					name string
					fn   func() error
				}{
					{"List", func() error {
						return s.List(ctx, "", func(storage.ObjectInfo) error { return errors.New("listed an object") })
					}},
					{"Stat", func() error { _, err := s.Stat(ctx, "k"); return err }},
					{"Get", func() error {
						rc, err := s.Get(ctx, "k", 0, -1)
						if err == nil {
							rc.Close()
						}
						return err
					}},
					{"Put", func() error {
						_, err := s.Put(ctx, "k", strings.NewReader("small"), 5, storage.PutOptions{})
						return err
					}},
					{"Put multipart", func() error {
						b := make([]byte, 2*MinPartSize+1)
						_, err := s.Put(ctx, "k", bytes.NewReader(b), int64(len(b)), storage.PutOptions{})
						return err
					}},
					{"Delete", func() error { return s.Delete(ctx, "k") }},
				}
				for _, c := range calls {
					err := within(t, c.name, c.fn)
					checkTimeout(t, c.name+" (region "+region+")", err, cfg, server.flag)
				}
			}
		})
	}
}

// slowPut puts size bytes to a server that reads the first slow bytes of
// the body 1 MiB at a time with pause between reads and the rest at once,
// through a store with the response and stall timeouts given, and returns
// how long it took and Put's error. The fast tail matters: when the
// client's last write returns, the socket buffers on both sides still hold
// several MiB, and read at the slow rate they took seconds to drain on a
// loaded machine, time in which the client rightly saw no byte move (a
// full run failed that way with a 2 s stall timeout). The slow part is what
// the tests are about; the tail is read before the client waits long.
func slowPut(t *testing.T, size, slow int64, pause, response, stall time.Duration) (time.Duration, error) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			buf := make([]byte, 1<<20)
			for read := int64(0); read < slow; read += int64(len(buf)) {
				if _, err := io.ReadFull(r.Body, buf); err != nil {
					break
				}
				time.Sleep(pause)
			}
			_, _ = io.Copy(io.Discard, r.Body)
		}
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	cfg := blackHoleConfig(srv.Listener.Addr().String())
	cfg.Region = "us-east-1"
	cfg.PartSize = size
	cfg.ResponseTimeout, cfg.StallTimeout = response, stall
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = within(t, "Put", func() error {
		_, err := s.Put(context.Background(), "slow", bytes.NewReader(make([]byte, size)), size, storage.PutOptions{})
		return err
	})
	return time.Since(start), err
}

// TestTimeoutSlowUploadNotCut: the response timeout starts once the whole
// request is sent, so an upload that takes several times the response
// timeout to trickle in, but keeps moving, succeeds.
func TestTimeoutSlowUploadNotCut(t *testing.T) {
	// 16 MiB at 5 MiB/s: over 3 s for the body, then 48 MiB at once.
	const response = time.Second
	took, err := slowPut(t, 64<<20, 16<<20, 200*time.Millisecond, response, 5*time.Second)
	if err != nil {
		t.Fatalf("a slow but moving upload failed after %v: %v", took.Round(time.Millisecond), err)
	}
	if took < 3*response {
		t.Logf("the upload took %v, not much longer than the response timeout %v: the test proves little on this machine", took, response)
	}
}

// TestTimeoutOpenBudget: a server that answers, but only slowly and with
// errors minio-go retries, cannot stretch opening the store past the
// connect and response timeouts together.
func TestTimeoutOpenBudget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(150 * time.Millisecond)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	cfg := blackHoleConfig(srv.Listener.Addr().String())
	cfg.Region = "us-east-1"
	err := within(t, "New", func() error { _, err := New(context.Background(), cfg); return err })
	checkTimeout(t, "New", err, cfg, FieldResponseTimeout)
	if !strings.Contains(err.Error(), "did not answer within 600ms") {
		t.Errorf("error %q does not give the whole budget, 600ms", err)
	}
}

// TestTimeoutGetBodyStall: a download that stops moving fails its read
// within the stall timeout with an error naming the setting.
func TestTimeoutGetBodyStall(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1048576")
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(make([]byte, 1024))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	defer srv.Close()
	defer close(release)
	cfg := blackHoleConfig(srv.Listener.Addr().String())
	cfg.Region = "us-east-1"
	cfg.StallTimeout = 300 * time.Millisecond
	s, err := newStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := s.Get(context.Background(), "k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	err = within(t, "reading the body", func() error { _, err := io.Copy(io.Discard, rc); return err })
	checkTimeout(t, "reading the body", err, cfg, FieldStallTimeout)
}

// TestTimeoutValidate: negative timeouts are configuration errors, each a
// *FieldError of its setting.
func TestTimeoutValidate(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Config)
		want   Field
	}{
		{func(c *Config) { c.ConnectTimeout = -time.Second }, FieldConnectTimeout},
		{func(c *Config) { c.ResponseTimeout = -time.Second }, FieldResponseTimeout},
		{func(c *Config) { c.StallTimeout = -time.Second }, FieldStallTimeout},
	} {
		c := Config{Bucket: "ckpt"}
		tc.mutate(&c)
		var fe *FieldError
		if err := c.Validate(); !errors.As(err, &fe) || fe.Field != tc.want || fe.Value != "-1s" {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
		}
	}
}

// TestStallTimeoutSparesAMovingUpload: an upload that takes twice the
// stall timeout but moves bytes all along is not cut. The transport's
// reader waits for the response the whole time the body is sent; on the
// code before, its read deadline was set once when that read began, so
// every upload longer than --s3-stall-timeout failed as "moved no byte"
// (CI saw it under load with a 5 s limit and a 1.3 s upload).
func TestStallTimeoutSparesAMovingUpload(t *testing.T) {
	// 16 MiB, 1 MiB every 300 ms: about 5 s for the body, with bytes
	// moving several times a second; then 48 MiB at once.
	if took, err := slowPut(t, 64<<20, 16<<20, 300*time.Millisecond, 5*time.Second, 2*time.Second); err != nil {
		t.Fatalf("an upload that kept moving failed after %v: %v", took.Round(time.Millisecond), err)
	}
}
