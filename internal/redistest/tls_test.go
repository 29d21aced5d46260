package redistest

import (
	"crypto/tls"
	"strings"
	"testing"
)

// TestTLSServers starts a TLS server and a mutual-TLS server and checks what they
// accept: a verified handshake with the PKI's CA (and server name), and for mutual TLS
// only a client with the PKI's client certificate.
func TestTLSServers(t *testing.T) {
	pki := NewPKI(t, "redis.test")
	plain := StartN(t, 1, Options{TLS: pki})[0]
	mutual := StartN(t, 1, Options{TLS: pki, TLSAuthClients: true})[0]
	if !strings.HasPrefix(plain.URL(), "rediss://") {
		t.Fatalf("URL = %q, want rediss://", plain.URL())
	}
	cert, err := pki.ClientCertificate()
	if err != nil {
		t.Fatal(err)
	}
	dial := func(s *Server, cfg *tls.Config) error {
		c, err := tls.Dial("tcp", s.Addr(), cfg)
		if err != nil {
			return err
		}
		return pingConn(c) // TLS 1.3: a refused client certificate shows on the first read
	}
	if err := dial(plain, &tls.Config{RootCAs: pki.Pool, ServerName: "redis.test"}); err != nil {
		t.Fatalf("TLS with CA and server name: %v", err)
	}
	if err := dial(plain, &tls.Config{RootCAs: pki.Pool}); err == nil {
		t.Fatal("TLS verified 127.0.0.1 against a certificate with a DNS name only")
	}
	if err := dial(mutual, &tls.Config{RootCAs: pki.Pool, ServerName: "redis.test"}); err == nil {
		t.Fatal("mutual TLS accepted a client without a certificate")
	}
	if err := dial(mutual, &tls.Config{RootCAs: pki.Pool, ServerName: "redis.test", Certificates: []tls.Certificate{cert}}); err != nil {
		t.Fatalf("mutual TLS with the client certificate: %v", err)
	}
}

// TestUnixSocketAndCommand covers SocketURL and Command (ACL set-up over the socket).
func TestUnixSocketAndCommand(t *testing.T) {
	s := StartN(t, 1)[0]
	u := s.SocketURL()
	if !strings.HasPrefix(u, "unix:///") {
		t.Fatalf("SocketURL = %q", u)
	}
	if err := ping("unix", strings.TrimPrefix(u, "unix://")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Command("ACL", "SETUSER", "u", "on", ">p", "~x*", "+get"); err != nil || r != "OK" {
		t.Fatalf("ACL SETUSER = %q, %v", r, err)
	}
	if r, err := s.Command("SET", "k", "v"); err != nil || r != "OK" {
		t.Fatalf("SET = %q, %v", r, err)
	}
	if r, err := s.Command("GET", "k"); err != nil || r != "v" {
		t.Fatalf("GET = %q, %v", r, err)
	}
	if _, err := s.Command("NOSUCHCOMMAND"); err == nil {
		t.Fatal("no error for an unknown command")
	}
}
