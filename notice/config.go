package notice

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"
)

// Source names as they appear in Config.Sources and Notice.Source.
const (
	SourceAWS = "aws"
	SourceGCP = "gcp"
	SourceURL = "url" // Config.Sources holds "url:" followed by the URL
)

// Defaults for the zero fields of Config.
const (
	DefaultAWSEndpoint    = "http://169.254.169.254"
	DefaultGCPEndpoint    = "http://metadata.google.internal"
	DefaultInterval       = 5 * time.Second
	DefaultRequestTimeout = 2 * time.Second
	DefaultWaitTimeout    = 2 * time.Minute
)

// Environment variables of the cloud SDKs that Config.ReadEnv honours as
// the SDKs do, so that a pod configured for them needs nothing more.
const (
	// EnvAWSEndpoint is the EC2 instance metadata service's base URL, such
	// as http://127.0.0.1:1338 (the AWS SDKs' and CLI's variable).
	EnvAWSEndpoint = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
	// EnvAWSEndpointMode is IPv4 (the default, http://169.254.169.254) or
	// IPv6 (http://[fd00:ec2::254]); EnvAWSEndpoint wins over it.
	EnvAWSEndpointMode = "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE"
	// EnvAWSDisabled set to true forbids contacting the metadata service.
	EnvAWSDisabled = "AWS_EC2_METADATA_DISABLED"
	// EnvGCPHost is the GCE metadata server as host or host:port, without
	// a scheme (the Google client libraries' variable).
	EnvGCPHost = "GCE_METADATA_HOST"
)

// awsIPv6Endpoint is IMDS on its IPv6 address (Nitro instances).
const awsIPv6Endpoint = "http://[fd00:ec2::254]"

// GCPNotice is how long a GCP preemptible or spot VM runs after it is told
// it is preempted (ACPI G2 soft off follows after 30 seconds).
const GCPNotice = 30 * time.Second

// Config says which sources to watch and how. The zero value of every field
// but Sources is usable; Validate reports what is wrong.
type Config struct {
	// Sources are "aws", "gcp" or "url:http://..." (see the package doc);
	// ParseSources reads them from a comma-separated list.
	Sources []string
	// AWSEndpoint is the EC2 instance metadata service. Default
	// http://169.254.169.254; ReadEnv sets it from EnvAWSEndpoint or
	// EnvAWSEndpointMode.
	AWSEndpoint string
	// AWSDisabled says the metadata service must not be contacted
	// (EnvAWSDisabled): a Config with the aws source is then invalid.
	AWSDisabled bool
	// GCPEndpoint is the GCE metadata server. Default
	// http://metadata.google.internal; ReadEnv sets it from EnvGCPHost.
	GCPEndpoint string
	// Interval is how often the aws and url sources poll, and how long any
	// source waits after a failed check. Default 5s.
	Interval time.Duration
	// RequestTimeout bounds every request but GCP's long poll. Default 2s.
	RequestTimeout time.Duration
	// WaitTimeout is how long GCP's long poll may wait for a change (sent as
	// timeout_sec; the request itself may take RequestTimeout longer).
	// Default 2m.
	WaitTimeout time.Duration
	// Clock returns the current time (GCP deadlines, token expiry). Default
	// time.Now.
	Clock func() time.Time
	// Log receives errors (the first per source at warn, later ones at
	// debug) and notices. Default: discard.
	Log *slog.Logger
}

// FieldSources is the field of a FieldError about Config.Sources.
const FieldSources = "sources"

// FieldError says which of Config was wrong, and why: Value is the source
// (its URL's password hidden), and Err reads after "names Value". The
// caller names the field as its user gave it (a flag, a variable).
type FieldError struct {
	Field string // FieldSources
	Value string
	Err   error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("notice: %s names %q: %v", e.Field, e.Value, e.Err)
}
func (e *FieldError) Unwrap() error { return e.Err }

// ParseSources splits a comma-separated list of sources, dropping blanks;
// "" gives none. Each source is checked as Validate checks it.
func ParseSources(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if err := checkSource(f); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// ReadEnv fills the endpoint fields left empty, and AWSDisabled, from the
// SDKs' variables (EnvAWSEndpoint, EnvAWSEndpointMode, EnvAWSDisabled,
// EnvGCPHost) as getenv (os.Getenv outside tests) returns them. It reports
// a value no SDK would accept; Validate checks the rest.
func (c *Config) ReadEnv(getenv func(string) string) error {
	if c.AWSEndpoint == "" {
		c.AWSEndpoint = strings.TrimSpace(getenv(EnvAWSEndpoint))
	}
	if c.AWSEndpoint == "" {
		switch mode := strings.TrimSpace(getenv(EnvAWSEndpointMode)); {
		case mode == "", strings.EqualFold(mode, "IPv4"):
		case strings.EqualFold(mode, "IPv6"):
			c.AWSEndpoint = awsIPv6Endpoint
		default:
			return fmt.Errorf("notice: %s is %q; use IPv4 or IPv6, or set %s", EnvAWSEndpointMode, mode, EnvAWSEndpoint)
		}
	}
	if strings.EqualFold(strings.TrimSpace(getenv(EnvAWSDisabled)), "true") {
		c.AWSDisabled = true
	}
	if host := strings.TrimSpace(getenv(EnvGCPHost)); host != "" && c.GCPEndpoint == "" {
		if strings.Contains(host, "/") {
			return fmt.Errorf("notice: %s is %q; it takes host or host:port without a scheme or path, as the Google libraries read it, e.g. 127.0.0.1:8080", EnvGCPHost, host)
		}
		c.GCPEndpoint = "http://" + host
	}
	return nil
}

// Validate reports the first thing wrong with c: a *FieldError for
// Sources, a sentence naming the SDK's variable for an endpoint.
func (c Config) Validate() error {
	seen := map[string]bool{}
	for _, s := range c.Sources {
		if err := checkSource(s); err != nil {
			return err
		}
		if seen[s] {
			return &FieldError{Field: FieldSources, Value: redactSource(s), Err: errors.New("it is given twice; name each source once")}
		}
		seen[s] = true
	}
	if seen[SourceAWS] && c.AWSDisabled {
		return &FieldError{Field: FieldSources, Value: SourceAWS,
			Err: fmt.Errorf("%s=true forbids contacting the EC2 instance metadata service; drop aws or unset %s", EnvAWSDisabled, EnvAWSDisabled)}
	}
	if c.AWSEndpoint != "" {
		if err := checkURL(c.AWSEndpoint); err != nil {
			return fmt.Errorf("notice: the AWS metadata endpoint %q (%s) is not usable: %v; use an http:// URL such as %s", redactURL(c.AWSEndpoint), EnvAWSEndpoint, err, DefaultAWSEndpoint)
		}
	}
	if c.GCPEndpoint != "" {
		if err := checkURL(c.GCPEndpoint); err != nil {
			return fmt.Errorf("notice: the GCP metadata endpoint %q (%s) is not usable: %v; set %s to host:port, e.g. metadata.google.internal", redactURL(c.GCPEndpoint), EnvGCPHost, err, EnvGCPHost)
		}
	}
	if c.Interval < 0 || c.RequestTimeout < 0 || c.WaitTimeout < 0 {
		return fmt.Errorf("notice: poll interval %s, request timeout %s and wait timeout %s must not be negative (0 means the default)", c.Interval, c.RequestTimeout, c.WaitTimeout)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.AWSEndpoint == "" {
		c.AWSEndpoint = DefaultAWSEndpoint
	}
	if c.GCPEndpoint == "" {
		c.GCPEndpoint = DefaultGCPEndpoint
	}
	c.AWSEndpoint = strings.TrimRight(c.AWSEndpoint, "/")
	c.GCPEndpoint = strings.TrimRight(c.GCPEndpoint, "/")
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

func checkSource(s string) error {
	switch {
	case s == SourceAWS, s == SourceGCP:
		return nil
	case strings.HasPrefix(s, SourceURL+":"):
		if err := checkURL(strings.TrimPrefix(s, SourceURL+":")); err != nil {
			return &FieldError{Field: FieldSources, Value: redactSource(s), Err: fmt.Errorf("%v; write url:http://host:port/path", err)}
		}
		return nil
	default:
		return &FieldError{Field: FieldSources, Value: redactSource(s), Err: errors.New("it is not a source; use aws, gcp or url:http://host:port/path, comma-separated")}
	}
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("cannot parse it")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("the scheme must be http or https")
	}
	if u.Host == "" {
		return fmt.Errorf("it has no host")
	}
	return nil
}

// redactSource hides a password in a url: source before it reaches an error
// or a log line.
func redactSource(s string) string {
	raw, ok := strings.CutPrefix(s, SourceURL+":")
	if !ok {
		return s
	}
	return SourceURL + ":" + redactURL(raw)
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
