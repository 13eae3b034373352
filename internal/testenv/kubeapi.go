package testenv

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
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

// KubeBinaries are the programs a test API server runs from.
type KubeBinaries struct {
	APIServer string // kube-apiserver
	Etcd      string // etcd
}

// RequireKubeBinaries returns kube-apiserver from the directory named by
// LIFEBOAT_TEST_K8S_BIN (scripts/k8s-build.sh install prints it) and etcd
// from that directory or PATH (Debian's etcd-server), or skips (or fails,
// see Skip) when either is missing. scripts/test.sh sets the variable.
func RequireKubeBinaries(t testing.TB) KubeBinaries {
	t.Helper()
	dir := os.Getenv("LIFEBOAT_TEST_K8S_BIN")
	if dir == "" {
		Skip(t, "no Kubernetes binaries: run the suite with scripts/test.sh, or set LIFEBOAT_TEST_K8S_BIN=$(scripts/k8s-build.sh install)")
	}
	b := KubeBinaries{APIServer: filepath.Join(dir, "kube-apiserver"), Etcd: filepath.Join(dir, "etcd")}
	if fi, err := os.Stat(b.APIServer); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("LIFEBOAT_TEST_K8S_BIN=%s has no executable kube-apiserver (%v); rebuild it with scripts/k8s-build.sh install", dir, err)
	}
	if _, err := os.Stat(b.Etcd); err != nil {
		p, err := exec.LookPath("etcd")
		if err != nil {
			Skip(t, "no etcd for the test API server: apt-get install etcd-server")
		}
		b.Etcd = p
	}
	return b
}

// KubeAPI is a running kube-apiserver (with its own etcd) on 127.0.0.1,
// authorising with RBAC and authenticating static bearer tokens. It has no
// nodes, controllers or kubelets: objects are what tests create.
type KubeAPI struct {
	// URL is https://127.0.0.1:PORT; Host and Port are its parts, the
	// values of KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT.
	URL, Host, Port string
	// CA is the PEM certificate the server's certificate chains to.
	CA []byte
	// AdminToken is in group system:masters.
	AdminToken string
	// Namespace is where tests work ("default").
	Namespace string
	// Log is the API server's log file.
	Log string

	tokens map[string]string // service account name -> token
	client *http.Client
}

// KubeServiceAccounts are the service accounts of Namespace that the test
// server has tokens for: "lifeboat" (bound to nothing until a test binds
// it) and "norights" (never bound to anything).
var KubeServiceAccounts = []string{"lifeboat", "norights"}

// StartKubeAPI starts etcd and kube-apiserver from b with a fresh data
// directory, certificates and tokens, and returns once the server is ready.
// Both are stopped when the test ends; their logs are printed if it failed.
func StartKubeAPI(t testing.TB, b KubeBinaries) *KubeAPI {
	t.Helper()
	dir := t.TempDir()
	k := &KubeAPI{Host: "127.0.0.1", Namespace: "default", AdminToken: randomToken(t), tokens: map[string]string{}}
	caPEM, caCert, caKey := newCA(t)
	k.CA = caPEM
	certPEM, keyPEM := newServerCert(t, caCert, caKey)
	saKey := newKeyPEM(t)
	lines := []string{k.AdminToken + `,admin,admin-uid,"system:masters"`}
	for _, sa := range KubeServiceAccounts {
		k.tokens[sa] = randomToken(t)
		user := "system:serviceaccount:" + k.Namespace + ":" + sa
		lines = append(lines, fmt.Sprintf(`%s,%s,%s-uid,"system:serviceaccounts,system:serviceaccounts:%s,system:authenticated"`, k.tokens[sa], user, sa, k.Namespace))
	}
	files := map[string][]byte{
		"ca.crt": caPEM, "server.crt": certPEM, "server.key": keyPEM, "sa.key": saKey,
		"tokens.csv": []byte(strings.Join(lines, "\n") + "\n"),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	k.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(k.client.CloseIdleConnections)

	var errs []error
	for attempt := range 3 { // another process may take a port between the probe and the bind
		etcdURL, err := startEtcd(t, b.Etcd, filepath.Join(dir, fmt.Sprintf("etcd-%d", attempt)))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		port := freePort(t)
		k.Port = strconv.Itoa(port)
		k.URL = "https://" + net.JoinHostPort(k.Host, k.Port)
		k.Log = filepath.Join(dir, fmt.Sprintf("kube-apiserver-%d.log", attempt))
		args := []string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + k.Port,
			"--tls-cert-file=" + filepath.Join(dir, "server.crt"), "--tls-private-key-file=" + filepath.Join(dir, "server.key"),
			"--client-ca-file=" + filepath.Join(dir, "ca.crt"),
			"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + filepath.Join(dir, "sa.key"),
			"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
			"--service-cluster-ip-range=10.0.0.0/24",
			// No controller creates service accounts here: pods name none.
			"--disable-admission-plugins=ServiceAccount",
			"--cert-dir=" + filepath.Join(dir, "certs"),
			"--profiling=false",
		}
		err = startDaemon(t, exec.Command(b.APIServer, args...), k.Log, 120*time.Second, func() bool {
			code, _ := k.do(http.MethodGet, "/readyz", nil, nil)
			return code == http.StatusOK
		})
		if err == nil {
			return k
		}
		errs = append(errs, err)
	}
	t.Fatalf("the test API server did not start: %v", errors.Join(errs...))
	return nil
}

// Token returns the bearer token of service account sa (one of
// KubeServiceAccounts).
func (k *KubeAPI) Token(sa string) string { return k.tokens[sa] }

// ServiceAccountDir writes a service-account directory as Kubernetes
// mounts it (token, ca.crt, namespace) for sa, and returns it.
func (k *KubeAPI) ServiceAccountDir(t testing.TB, sa string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string][]byte{"token": []byte(k.tokens[sa]), "ca.crt": k.CA, "namespace": []byte(k.Namespace)} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Do sends one request as admin: body (when not nil) as JSON, the answer
// decoded into out (when not nil). It returns the HTTP status; a
// transport failure fails the test.
func (k *KubeAPI) Do(t testing.TB, method, path string, body, out any) int {
	t.Helper()
	code, err := k.do(method, path, body, out)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return code
}

func (k *KubeAPI) do(method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, k.URL+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+k.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s: %w", b, err)
		}
	}
	if resp.StatusCode/100 != 2 && out == nil && method != http.MethodGet {
		return resp.StatusCode, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return resp.StatusCode, nil
}

// ReadLog returns what the API server has logged so far.
func (k *KubeAPI) ReadLog() string {
	b, _ := os.ReadFile(k.Log)
	return string(b)
}

// startEtcd runs etcd on free 127.0.0.1 ports with data in dir and returns
// its client URL once it answers.
func startEtcd(t testing.TB, bin, dir string) (string, error) {
	t.Helper()
	client := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	peer := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	args := []string{
		"--name=test", "--data-dir=" + dir,
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=test=" + peer,
	}
	hc := &http.Client{Timeout: time.Second}
	err := startDaemon(t, exec.Command(bin, args...), dir+".log", 60*time.Second, func() bool {
		resp, err := hc.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return client, err
}

func randomToken(t testing.TB) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyPEM(t testing.TB, k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func newKeyPEM(t testing.TB) []byte { return keyPEM(t, newKey(t)) }

func newCA(t testing.TB) ([]byte, *x509.Certificate, *ecdsa.PrivateKey) {
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lifeboat-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert, key
}

func newServerCert(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certPEM, keyPEMBytes []byte) {
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM(t, key)
}
