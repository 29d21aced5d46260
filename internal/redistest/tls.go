package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// PKI is a throw-away certificate authority with one server and one client certificate,
// generated when the test runs (nothing checked in that could expire). Files are PEM.
//
//	pki := redistest.NewPKI(t, "redis.test")             // server cert for DNS redis.test only
//	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki, TLSAuthClients: true})
//	// connect with pki.CAFile, pki.ClientCertFile/ClientKeyFile, server name redis.test
type PKI struct {
	CAFile         string // the CA certificate
	ServerCertFile string // signed by the CA, for the DNS names given (and 127.0.0.1 if none)
	ServerKeyFile  string
	ClientCertFile string // signed by the CA, for client authentication
	ClientKeyFile  string
	Pool           *x509.CertPool // holds the CA certificate
}

// NewPKI generates a CA, a server certificate and a client certificate in a temporary
// directory of the test. With dnsNames the server certificate holds those names ONLY (no
// IP address), so a client that dials 127.0.0.1 must verify one of them (server_name);
// without, it holds "localhost" and 127.0.0.1.
func NewPKI(t interface {
	Helper()
	TempDir() string
	Fatalf(string, ...any)
}, dnsNames ...string) *PKI {
	t.Helper()
	p, err := GeneratePKI(t.TempDir(), dnsNames...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return p
}

// GeneratePKI is NewPKI without a testing.T: files go to dir.
func GeneratePKI(dir string, dnsNames ...string) (*PKI, error) {
	caKey, caCert, caDER, err := newCert(nil, nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "redistest CA"},
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
	})
	if err != nil {
		return nil, err
	}
	srv := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "redistest server"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dnsNames,
	}
	if len(dnsNames) == 0 {
		srv.DNSNames = []string{"localhost"}
		srv.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	srvKey, _, srvDER, err := newCert(caKey, caCert, srv)
	if err != nil {
		return nil, err
	}
	cliKey, _, cliDER, err := newCert(caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "redistest client"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	p := &PKI{
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
		Pool:           x509.NewCertPool(),
	}
	p.Pool.AddCert(caCert)
	srvKeyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	cliKeyDER, err := x509.MarshalPKCS8PrivateKey(cliKey)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		path string
		typ  string
		der  []byte
	}{
		{p.CAFile, "CERTIFICATE", caDER},
		{p.ServerCertFile, "CERTIFICATE", srvDER},
		{p.ServerKeyFile, "PRIVATE KEY", srvKeyDER},
		{p.ClientCertFile, "CERTIFICATE", cliDER},
		{p.ClientKeyFile, "PRIVATE KEY", cliKeyDER},
	} {
		data := pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der})
		if err := os.WriteFile(f.path, data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return p, nil
}

// ClientCertificate loads the client certificate for a tls.Config.
func (p *PKI) ClientCertificate() (tls.Certificate, error) {
	return tls.LoadX509KeyPair(p.ClientCertFile, p.ClientKeyFile)
}

// newCert creates a key and a certificate from tmpl, signed by parent (self-signed when
// parent is nil). It returns the key, the parsed certificate and its DER.
func newCert(parentKey *ecdsa.PrivateKey, parent *x509.Certificate, tmpl *x509.Certificate) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serial: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	signer, issuer := key, tmpl
	if parent != nil {
		signer, issuer = parentKey, parent
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, cert, der, nil
}

// portArgs listen on s.port: plain TCP, or TLS only (the plain port off).
func (s *Server) portArgs() []string {
	if s.tls == nil {
		return []string{"--port", strconv.Itoa(s.port)}
	}
	auth := "optional"
	if s.mtls {
		auth = "yes"
	}
	return []string{
		"--port", "0", "--tls-port", strconv.Itoa(s.port),
		"--tls-cert-file", s.tls.ServerCertFile, "--tls-key-file", s.tls.ServerKeyFile,
		"--tls-ca-cert-file", s.tls.CAFile, "--tls-auth-clients", auth,
	}
}

// pingTCP checks the TCP port answers PING (over TLS for a TLS server; readiness only,
// so the certificate is not verified here).
func (s *Server) pingTCP() error {
	if s.tls == nil {
		return ping("tcp", s.Addr())
	}
	cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // readiness probe of our own server
	if s.mtls {
		cert, err := s.tls.ClientCertificate()
		if err != nil {
			return err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: pingDialTimeout}, "tcp", s.Addr(), cfg)
	if err != nil {
		return err
	}
	return pingConn(c)
}
