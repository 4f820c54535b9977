package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// The endpoint's security is exporter-toolkit's web config (TLS and bcrypt
// basic auth, --web.config.file). These tests run the real binary with a
// certificate, key and password made at test time, and speak to it as
// Prometheus would.

const authUser = "prometheus"

// webFixture is a web config in a temporary directory and what a client
// needs to trust and authenticate against it.
type webFixture struct {
	dir      string
	config   string
	password string
	hash     []byte
	pool     *x509.CertPool
	cert     *x509.Certificate
}

// newKey returns a fresh P-256 key.
func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return key
}

// selfSigned returns a DER certificate for 127.0.0.1 and localhost signed
// by key itself, valid for an hour either side of now.
func selfSigned(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "plateau_exporter test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create certificate: %v", err)
	}
	return der
}

func writePEM(t *testing.T, path, blockType string, der []byte) {
	t.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t *testing.T, path string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "PRIVATE KEY", der)
}

// newWebFixture fills testdata/web/web-config.yml.tmpl with a fresh
// certificate, key and bcrypt hash in a temporary directory.
func newWebFixture(t *testing.T) *webFixture {
	t.Helper()
	f := &webFixture{dir: t.TempDir()}
	key := newKey(t)
	der := selfSigned(t, key)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	f.cert = cert
	f.pool = x509.NewCertPool()
	f.pool.AddCert(cert)
	writePEM(t, filepath.Join(f.dir, "server.crt"), "CERTIFICATE", der)
	writeKey(t, filepath.Join(f.dir, "server.key"), key)

	secret := make([]byte, 12)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	f.password = hex.EncodeToString(secret)
	// The default cost, as a deployment would use, so the test sees the
	// real price of a check (exporter-toolkit caches successful ones).
	f.hash, err = bcrypt.GenerateFromPassword([]byte(f.password), bcrypt.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	f.config = f.write(t, "web-config.yml", func(s string) string { return s })
	return f
}

// write stores the template, filled with the fixture's hash and then
// changed by edit, as name in the fixture's directory and returns its path.
func (f *webFixture) write(t *testing.T, name string, edit func(string) string) string {
	t.Helper()
	tmpl, err := os.ReadFile(filepath.Join("testdata", "web", "web-config.yml.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	filled := strings.Replace(string(tmpl), `"@BCRYPT@"`, `"`+string(f.hash)+`"`, 1)
	if filled == string(tmpl) {
		t.Fatal("the web config template has no \"@BCRYPT@\" value to fill")
	}
	path := filepath.Join(f.dir, name)
	if err := os.WriteFile(path, []byte(edit(filled)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tlsDaemon is the binary serving HTTPS with basic auth.
type tlsDaemon struct {
	addr   string
	url    string
	client *http.Client
	cmd    *exec.Cmd
	stderr *probetest.LogBuffer
	done   chan struct{}
}

func startTLSDaemon(t *testing.T, f *webFixture) *tlsDaemon {
	t.Helper()
	cfg, _ := writeConfig(t, "{name: s, kind: sequential, file_size: 1MiB, block_size: 1MiB, interval: 1h, timeout: 1m}")
	addr := probetest.FreeAddr(t)
	d := &tlsDaemon{
		addr:   addr,
		url:    "https://" + addr,
		stderr: &probetest.LogBuffer{},
		client: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.pool}},
		},
	}
	d.cmd = exec.Command(binary, "--web.listen-address="+addr, "--web.enable-lifecycle", "--web.config.file="+f.config,
		"--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults", "--log.level=debug",
		"--slurm.cgroup-path="+t.TempDir(), "--slurm.spool-path="+t.TempDir())
	d.done = runUntilCleanup(t, d.cmd, d.stderr, d.client.CloseIdleConnections)
	probetest.WaitUntil(t, "the daemon to answer /-/healthy over TLS with credentials", 30*time.Second, func() bool {
		failIfExited(t, d.done, d.stderr)
		code, _, err := d.do(http.MethodGet, "/-/healthy", authUser, f.password)
		return err == nil && code == http.StatusOK
	})
	return d
}

// do sends one request, with basic auth unless user is empty.
func (d *tlsDaemon) do(method, path, user, password string) (int, string, error) {
	req, err := http.NewRequest(method, d.url+path, nil)
	if err != nil {
		return 0, "", err
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func (d *tlsDaemon) mustDo(t *testing.T, method, path, user, password string) (int, string) {
	t.Helper()
	code, body, err := d.do(method, path, user, password)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, body
}

func TestWebConfigTLSAndBasicAuth(t *testing.T) {
	f := newWebFixture(t)
	d := startTLSDaemon(t, f)

	t.Run("credentials", func(t *testing.T) {
		for _, c := range []struct {
			name, method, path, user, password string
		}{
			{"no credentials", http.MethodGet, "/metrics", "", ""},
			{"wrong password", http.MethodGet, "/metrics", authUser, f.password + "x"},
			{"unknown user", http.MethodGet, "/metrics", "root", f.password},
			{"empty password", http.MethodGet, "/metrics", authUser, ""},
			{"health without credentials", http.MethodGet, "/-/healthy", "", ""},
			{"landing page without credentials", http.MethodGet, "/", "", ""},
			{"reload without credentials", http.MethodPost, "/-/reload", "", ""},
			{"reload with a wrong password", http.MethodPost, "/-/reload", authUser, "prometheus"},
		} {
			code, body := d.mustDo(t, c.method, c.path, c.user, c.password)
			if code != http.StatusUnauthorized {
				t.Errorf("%s: %s %s: HTTP %d, want 401", c.name, c.method, c.path, code)
			}
			if strings.Contains(body, "plateau_") {
				t.Errorf("%s: %s %s: the 401 leaks exporter output: %.200s", c.name, c.method, c.path, body)
			}
		}
		code, body := d.mustDo(t, http.MethodGet, "/metrics", authUser, f.password)
		if code != http.StatusOK || !strings.Contains(body, "plateau_exporter_build_info") {
			t.Fatalf("GET /metrics with the right credentials: HTTP %d: %.300s", code, body)
		}
	})

	t.Run("401 asks for basic auth", func(t *testing.T) {
		resp, err := d.client.Get(d.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Basic") {
			t.Errorf("401 without WWW-Authenticate: Basic (got %q): clients would not know to authenticate", got)
		}
	})

	// The reload is a state change: only an authenticated POST may cause
	// one, and the success timestamp shows whether one happened.
	t.Run("reload", func(t *testing.T) {
		reloadedAt := func() float64 {
			t.Helper()
			code, body := d.mustDo(t, http.MethodGet, "/metrics", authUser, f.password)
			if code != http.StatusOK {
				t.Fatalf("GET /metrics: HTTP %d", code)
			}
			v := value(body, "plateau_config_last_reload_success_timestamp_seconds ")
			if v <= 0 {
				t.Fatalf("no plateau_config_last_reload_success_timestamp_seconds in /metrics")
			}
			return v
		}
		before := reloadedAt()
		if code, _ := d.mustDo(t, http.MethodPost, "/-/reload", "", ""); code != http.StatusUnauthorized {
			t.Errorf("POST /-/reload without credentials: HTTP %d, want 401", code)
		}
		if code, _ := d.mustDo(t, http.MethodPost, "/-/reload", authUser, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("POST /-/reload with a wrong password: HTTP %d, want 401", code)
		}
		if code, _ := d.mustDo(t, http.MethodGet, "/-/reload", authUser, f.password); code != http.StatusMethodNotAllowed {
			t.Errorf("GET /-/reload with credentials: HTTP %d, want 405 (no GET side effects)", code)
		}
		if after := reloadedAt(); after != before {
			t.Fatalf("the config was reloaded by a refused request (timestamp %f -> %f)", before, after)
		}
		code, body := d.mustDo(t, http.MethodPost, "/-/reload", authUser, f.password)
		if code != http.StatusOK {
			t.Fatalf("POST /-/reload with the right credentials: HTTP %d: %s", code, body)
		}
		if after := reloadedAt(); after <= before {
			t.Fatalf("an accepted reload did not reload (timestamp %f -> %f)", before, after)
		}
	})

	t.Run("TLS handshake", func(t *testing.T) {
		conn, err := tls.Dial("tcp", d.addr, &tls.Config{RootCAs: f.pool, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("TLS handshake with the test CA: %v", err)
		}
		st := conn.ConnectionState()
		conn.Close()
		if !st.HandshakeComplete || st.Version < tls.VersionTLS12 {
			t.Errorf("handshake complete %v, version %#x; want a complete TLS 1.2+ handshake", st.HandshakeComplete, st.Version)
		}
		if len(st.PeerCertificates) == 0 || !st.PeerCertificates[0].Equal(f.cert) {
			t.Errorf("the server did not present the configured certificate")
		}
	})

	t.Run("untrusted certificate refused by the client", func(t *testing.T) {
		_, err := http.Get(d.url + "/metrics")
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("a client without the test CA got %v, want an unknown-authority error", err)
		}
	})

	t.Run("min_version enforced", func(t *testing.T) {
		conn, err := tls.Dial("tcp", d.addr, &tls.Config{RootCAs: f.pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
		if err == nil {
			conn.Close()
			t.Fatal("a TLS 1.1 handshake succeeded although the web config sets min_version TLS12")
		}
	})

	t.Run("plain HTTP gets no metrics", func(t *testing.T) {
		resp, err := http.Get("http://" + d.addr + "/metrics")
		if err != nil {
			return // the connection was refused outright: fine
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "plateau_") {
			t.Fatalf("plain HTTP to the TLS port: HTTP %d: %.200s", resp.StatusCode, body)
		}
	})
}

// A wrong web config must stop the daemon at start with a message naming
// the problem, not surface later as failed scrapes.
func TestWebConfigRefusedAtStart(t *testing.T) {
	f := newWebFixture(t)
	otherKey := newKey(t)
	writeKey(t, filepath.Join(f.dir, "other.key"), otherKey)
	cases := []struct {
		name string
		edit func(string) string
		want string
	}{
		{"missing cert file", func(s string) string { return strings.Replace(s, "cert_file: server.crt", "cert_file: absent.crt", 1) }, "absent.crt"},
		{"key not matching the certificate", func(s string) string { return strings.Replace(s, "key_file: server.key", "key_file: other.key", 1) }, "private key does not match public key"},
		{"bad YAML", func(s string) string { return s + "tls_server_config: [\n" }, "yaml"},
		{"unknown key", func(s string) string { return strings.Replace(s, "basic_auth_users:", "basic_auth_user:", 1) }, "basic_auth_user"},
		{"password not bcrypt-hashed", func(s string) string { return regexp.MustCompile(`"\$2[aby]\$[^"]*"`).ReplaceAllString(s, "hunter2") }, "bcrypt"},
		{"no such file", nil, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(f.dir, "absent-web-config.yml")
			if c.edit != nil {
				path = f.write(t, strings.ReplaceAll(c.name, " ", "-")+".yml", c.edit)
			}
			cfg, _ := writeConfig(t, "{name: s, kind: sequential, file_size: 1MiB, block_size: 1MiB, interval: 1h, timeout: 1m}")
			cmd := exec.Command(binary, "--web.listen-address="+probetest.FreeAddr(t), "--web.config.file="+path,
				"--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults")
			var stderr probetest.LogBuffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() == 0 {
					t.Fatalf("daemon exited with %v, want a non-zero status", err)
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("daemon still running 30s after start with a bad web config:\n%s", stderr.String())
			}
			msg := stderr.String()
			if !strings.Contains(msg, path) || !strings.Contains(msg, c.want) {
				t.Errorf("the start error should name the file %s and say %q:\n%s", path, c.want, msg)
			}
		})
	}
}
