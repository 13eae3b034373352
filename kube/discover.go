package kube

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultServiceAccountDir is where Kubernetes mounts a pod's
// service-account token, CA bundle and namespace.
const DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// DefaultTimeout bounds one request attempt.
const DefaultTimeout = 5 * time.Second

// ErrNotInCluster means there is no API server to talk to: lifeboat does
// not run in a Kubernetes pod, or the pod has no service-account token.
var ErrNotInCluster = errors.New("kube: not in a Kubernetes pod with a service-account token")

// Config says how to reach the API server and which pod lifeboat runs in.
type Config struct {
	// Server is the API server's base URL, https://host:port.
	Server string
	// TokenFile holds the bearer token; it is read at each request.
	TokenFile string
	// CAFile is the PEM bundle the server's certificate must chain to.
	CAFile string
	// Namespace and Pod name lifeboat's own pod.
	Namespace string
	Pod       string
	// PodUID, when known (downward API), saves a lookup before the first
	// event.
	PodUID string
	// UserAgent is sent with each request.
	UserAgent string
	// Timeout bounds one attempt. Default DefaultTimeout.
	Timeout time.Duration
	// Retries after a failed attempt (a connection error, 429 or 5xx).
	// Default 2; negative: none.
	Retries int
	// Backoff is the wait before retry n (from 1). Default: 200ms doubled
	// each time, at most 1s, or the server's Retry-After up to 1s.
	Backoff func(n int) time.Duration
}

// Discover reads the in-cluster configuration: the API server from
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the token, CA and
// namespace from saDir (token, ca.crt, namespace), the pod's name from
// LIFEBOAT_POD_NAME (the downward API) or else HOSTNAME, its namespace
// from LIFEBOAT_POD_NAMESPACE or else saDir/namespace, and its uid from
// LIFEBOAT_POD_UID when set. getenv is os.Getenv outside tests. Outside a
// pod the error wraps ErrNotInCluster and says what is missing.
func Discover(getenv func(string) string, saDir string) (Config, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return Config{}, fmt.Errorf("%w: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set", ErrNotInCluster)
	}
	cfg := Config{
		Server:    "https://" + net.JoinHostPort(host, port),
		TokenFile: filepath.Join(saDir, "token"),
		CAFile:    filepath.Join(saDir, "ca.crt"),
		Namespace: getenv("LIFEBOAT_POD_NAMESPACE"),
		Pod:       getenv("LIFEBOAT_POD_NAME"),
		PodUID:    getenv("LIFEBOAT_POD_UID"),
	}
	if _, err := os.Stat(cfg.TokenFile); err != nil {
		return Config{}, fmt.Errorf("%w: no service-account token at %s (automountServiceAccountToken: false?)", ErrNotInCluster, cfg.TokenFile)
	}
	if cfg.Namespace == "" {
		b, err := os.ReadFile(filepath.Join(saDir, "namespace"))
		if err != nil {
			return Config{}, fmt.Errorf("kube: the pod's namespace: LIFEBOAT_POD_NAMESPACE is not set and %v", err)
		}
		cfg.Namespace = strings.TrimSpace(string(b))
	}
	if cfg.Pod == "" {
		cfg.Pod = getenv("HOSTNAME")
	}
	if cfg.Pod == "" || cfg.Namespace == "" {
		return Config{}, errors.New("kube: the pod's name is unknown: set LIFEBOAT_POD_NAME from the downward API (fieldRef metadata.name)")
	}
	return cfg, nil
}

// PodRef is namespace/name, for messages.
func (c Config) PodRef() string { return c.Namespace + "/" + c.Pod }
