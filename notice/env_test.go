package notice

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestReadEnv(t *testing.T) {
	for _, tc := range []struct {
		name        string
		env         map[string]string
		aws, gcp    string
		awsDisabled bool
		errText     string
	}{
		{name: "none"},
		{name: "aws endpoint", env: map[string]string{EnvAWSEndpoint: "http://127.0.0.1:1338"}, aws: "http://127.0.0.1:1338"},
		{name: "aws ipv6 mode", env: map[string]string{EnvAWSEndpointMode: "IPv6"}, aws: "http://[fd00:ec2::254]"},
		{name: "aws ipv4 mode", env: map[string]string{EnvAWSEndpointMode: "ipv4"}},
		{name: "aws endpoint wins over mode", env: map[string]string{EnvAWSEndpoint: "http://10.0.0.1", EnvAWSEndpointMode: "IPv6"}, aws: "http://10.0.0.1"},
		{name: "aws bad mode", env: map[string]string{EnvAWSEndpointMode: "IPv5"}, errText: EnvAWSEndpointMode},
		{name: "aws disabled", env: map[string]string{EnvAWSDisabled: "True"}, awsDisabled: true},
		{name: "aws not disabled", env: map[string]string{EnvAWSDisabled: "false"}},
		{name: "gcp host", env: map[string]string{EnvGCPHost: "127.0.0.1:8080"}, gcp: "http://127.0.0.1:8080"},
		{name: "gcp host name", env: map[string]string{EnvGCPHost: "metadata.internal"}, gcp: "http://metadata.internal"},
		{name: "gcp host with a scheme", env: map[string]string{EnvGCPHost: "http://127.0.0.1:8080"}, errText: EnvGCPHost},
		{name: "gcp host with a path", env: map[string]string{EnvGCPHost: "127.0.0.1/x"}, errText: EnvGCPHost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			err := c.ReadEnv(func(k string) string { return tc.env[k] })
			if tc.errText != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("ReadEnv error = %v, want one naming %s", err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.AWSEndpoint != tc.aws || c.GCPEndpoint != tc.gcp || c.AWSDisabled != tc.awsDisabled {
				t.Errorf("aws %q gcp %q disabled %v, want %q %q %v", c.AWSEndpoint, c.GCPEndpoint, c.AWSDisabled, tc.aws, tc.gcp, tc.awsDisabled)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// TestAWSDisabledRefusesAWSNotices: AWS_EC2_METADATA_DISABLED=true forbids
// contacting IMDS, so --notices aws is a configuration error that names both.
func TestAWSDisabledRefusesAWSNotices(t *testing.T) {
	c := Config{Sources: []string{SourceGCP, SourceAWS}}
	if err := c.ReadEnv(func(k string) string { return map[string]string{EnvAWSDisabled: "true"}[k] }); err != nil {
		t.Fatal(err)
	}
	err := c.Validate()
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != FieldSources || fe.Value != SourceAWS || !strings.Contains(err.Error(), EnvAWSDisabled) {
		t.Errorf("Validate = %v, want a FieldError of %s naming aws and %s", err, FieldSources, EnvAWSDisabled)
	}
	c.Sources = []string{SourceGCP}
	if err := c.Validate(); err != nil {
		t.Errorf("without aws: Validate = %v", err)
	}
}

// TestBadEndpointNamesTheVariable: an endpoint that is not a URL is
// reported with the variable it came from.
func TestBadEndpointNamesTheVariable(t *testing.T) {
	var c Config
	if err := c.ReadEnv(func(k string) string { return map[string]string{EnvAWSEndpoint: "169.254.169.254"}[k] }); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), EnvAWSEndpoint) {
		t.Errorf("Validate = %v, want an error naming %s", err, EnvAWSEndpoint)
	}
}

// TestGCPHostFromEnv: GCE_METADATA_HOST (host:port, as the Google libraries
// read it) points the gcp source at another metadata server.
func TestGCPHostFromEnv(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/computeMetadata/v1/instance/preempted" || r.Header.Get("Metadata-Flavor") != "Google" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("ETag", "e1")
		fmt.Fprint(w, "TRUE")
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := fast(SourceGCP)
	cfg.Clock = func() time.Time { return now }
	if err := cfg.ReadEnv(func(k string) string { return map[string]string{EnvGCPHost: u.Host}[k] }); err != nil {
		t.Fatal(err)
	}
	ch, stop := start(t, cfg)
	n := recv(t, ch)
	stop()
	want := Notice{Kind: KindPreemption, Source: SourceGCP, Deadline: now.Add(GCPNotice), Detail: "preempted"}
	if n != want {
		t.Errorf("notice = %+v, want %+v", n, want)
	}
}
