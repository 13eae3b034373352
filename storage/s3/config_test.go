package s3

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := Config{Bucket: "ckpt"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no bucket", func(c *Config) { c.Bucket = "" }, "no bucket"},
		{"no scheme", func(c *Config) { c.Endpoint = "minio:9000" }, "http:// or https://"},
		{"path in endpoint", func(c *Config) { c.Endpoint = "http://minio:9000/ckpt" }, "scheme://host[:port] only"},
		{"bad lookup", func(c *Config) { c.BucketLookup = "virtual" }, "auto, path or dns"},
		{"half keys", func(c *Config) { c.AccessKey = "a" }, "AccessKey and SecretKey: give both"},
		{"small part", func(c *Config) { c.PartSize = 1 << 20 }, "part size"},
		{"negative parallelism", func(c *Config) { c.Parallelism = -1 }, "parallelism"},
		{"negative request attempts", func(c *Config) { c.RequestAttempts = -1 }, "request attempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{
		"AWS_ENDPOINT_URL":   "http://generic:9000",
		"AWS_DEFAULT_REGION": "eu-west-1",
		"AWS_CA_BUNDLE":      "/etc/ca.pem",
	}
	var c Config
	c.FromEnv(func(k string) string { return env[k] })
	if c.Endpoint != "http://generic:9000" || c.Region != "eu-west-1" || c.CAFile != "/etc/ca.pem" {
		t.Fatalf("FromEnv = %v", c)
	}
	env["AWS_ENDPOINT_URL_S3"] = "http://s3-specific:9000"
	c = Config{}
	c.FromEnv(func(k string) string { return env[k] })
	if c.Endpoint != "http://s3-specific:9000" {
		t.Fatalf("AWS_ENDPOINT_URL_S3 not preferred: %v", c)
	}
	c = Config{Endpoint: "http://flag:9000"}
	c.FromEnv(func(k string) string { return env[k] })
	if c.Endpoint != "http://flag:9000" {
		t.Fatalf("FromEnv overrode a set field: %v", c)
	}
}

// TestValidateRedactsEndpointCredentials: an endpoint with credentials
// (Config.Endpoint) is refused without showing them.
func TestValidateRedactsEndpointCredentials(t *testing.T) {
	for _, ep := range []string{"http://AKIAUSER:hunter2pw@minio:9000", "ftp://AKIAUSER:hunter2pw@minio", "http://AKIAUSER:hunter2pw@mi nio:x"} {
		err := Config{Endpoint: ep, Bucket: "b"}.Validate()
		if err == nil || strings.Contains(err.Error(), "hunter2pw") || strings.Contains(err.Error(), "AKIAUSER") {
			t.Errorf("Validate with endpoint %q = %v; want an error that hides the credentials", ep, err)
		}
	}
}
