package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RequireEC2Mock returns the path of AWS's amazon-ec2-metadata-mock named
// by LIFEBOAT_TEST_EC2_MOCK, or skips (or fails, see Skip) when it is not
// set. scripts/test.sh builds the mock (scripts/ec2-metadata-mock.sh) and
// sets it.
func RequireEC2Mock(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("LIFEBOAT_TEST_EC2_MOCK")
	if bin == "" {
		Skip(t, "no amazon-ec2-metadata-mock: run the suite with scripts/test.sh, or set LIFEBOAT_TEST_EC2_MOCK=$(scripts/ec2-metadata-mock.sh install)")
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("LIFEBOAT_TEST_EC2_MOCK=%s is not an executable file (%v); rebuild it with scripts/ec2-metadata-mock.sh install", bin, err)
	}
	return bin
}

// EC2Mock is a running amazon-ec2-metadata-mock.
type EC2Mock struct {
	// Endpoint is its base URL, http://127.0.0.1:PORT: the value for
	// AWS_EC2_METADATA_SERVICE_ENDPOINT.
	Endpoint string
	// Log is the file its output goes to.
	Log string
}

// ReadLog returns what the mock has logged so far.
func (m EC2Mock) ReadLog() string {
	b, _ := os.ReadFile(m.Log)
	return string(b)
}

// StartEC2Mock runs the mock at bin (see RequireEC2Mock) with args, for
// example "spot", "--imdsv2", "--rebalance-delay-sec", "1", listening on
// 127.0.0.1:port, and returns once it answers a token request. Port 0
// picks a free port. The mock's delays count from the moment it starts. It
// is stopped when the test ends, and its log is printed if the test failed.
func StartEC2Mock(t testing.TB, bin string, port int, args ...string) EC2Mock {
	t.Helper()
	dir := t.TempDir()
	attempts := 1
	if port == 0 {
		attempts = 5 // another process may take the port between the probe and the bind
	}
	var errs []error
	for i := range attempts {
		p := port
		if p == 0 {
			p = freePort(t)
		}
		m := EC2Mock{Endpoint: "http://127.0.0.1:" + strconv.Itoa(p), Log: filepath.Join(dir, fmt.Sprintf("mock-%d.log", i))}
		err := startMock(t, bin, dir, m, p, args)
		if err == nil {
			return m
		}
		errs = append(errs, err)
	}
	t.Fatalf("amazon-ec2-metadata-mock did not start: %v", errors.Join(errs...))
	return EC2Mock{}
}

func startMock(t testing.TB, bin, dir string, m EC2Mock, port int, args []string) error {
	t.Helper()
	cmd := exec.Command(bin, append(append([]string(nil), args...), "--hostname", "127.0.0.1", "--port", strconv.Itoa(port))...)
	// The mock reads $HOME/aemm-config.json when it exists: give it an
	// empty home so that only args configure it.
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	err := startDaemon(t, cmd, m.Log, 30*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodPut, m.Endpoint+"/latest/api/token", nil)
		req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		return fmt.Errorf("port %d: %w", port, err)
	}
	return nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
