package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
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
)

// TestListensBeyondLoopbackOnlyWithAuth: the binary refuses to listen on every address while it has no
// API key (every caller would be the local user); once it has one it starts there, says in its log how
// callers are authenticated, serves HTTPS with --tls-cert/--tls-key, and answers only callers with a
// key — under any Host name, since the key, not the name, is what protects it.
func TestListensBeyondLoopbackOnlyWithAuth(t *testing.T) {
	t.Parallel()
	bin := buildChatd(t)
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "chatd.db")

	refused := exec.Command(bin, "serve", "--addr", "0.0.0.0:0", "--db", db)
	out, err := refused.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "only safe on loopback") {
		t.Fatalf("serve on 0.0.0.0 without keys: %v\n%s", err, out)
	}

	create := exec.Command(bin, "keys", "create", "--user", "ops", "--admin", "--db", db)
	keyOut, err := create.Output()
	if err != nil {
		t.Fatalf("keys create: %v", err)
	}
	key := strings.TrimSpace(string(keyOut))
	if !regexp.MustCompile(`^chd_[A-Za-z0-9_-]{43}$`).MatchString(key) {
		t.Fatalf("keys create printed %q on stdout; want the key alone", keyOut)
	}

	certFile, keyFile, pool := selfSigned(t, dir)
	p := &process{name: "chatd", out: &logBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve", "--addr", "0.0.0.0:0", "--db", db, "--tls-cert", certFile, "--tls-key", keyFile)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("chatd output:\n%s", p.out)
		}
	})
	listening := regexp.MustCompile(`msg="chatd listening" url=https://\S+:(\d+) .*auth="API keys`)
	var port string
	if !poll(func() bool {
		m := listening.FindStringSubmatch(p.out.String())
		if m != nil {
			port = m[1]
		}
		return m != nil
	}) {
		t.Fatalf("no https listening line with auth in the log:\n%s", p.out)
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(host, bearer string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), patience)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://127.0.0.1:"+port+"/v1/sessions", nil)
		req.Host = host
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET over TLS: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("127.0.0.1:"+port, ""); code != http.StatusUnauthorized {
		t.Errorf("without a key: %d; want 401", code)
	}
	if code := get("127.0.0.1:"+port, key); code != http.StatusOK {
		t.Errorf("with the key: %d; want 200", code)
	}
	if code := get("chat.example.com", key); code != http.StatusOK {
		t.Errorf("with the key, for another host name: %d; want 200", code)
	}
	if code := get("chat.example.com", "chd_"+strings.Repeat("A", 43)); code != http.StatusUnauthorized {
		t.Errorf("with a wrong key: %d; want 401", code)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key, and returns their files and a
// pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chatd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
