package caddyredlock

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// This file holds the `tls` block: its config (TLS), its Caddyfile parsing, its checks,
// and the *tls.Config it gives the locker for the rediss:// nodes.

// TLS is the `tls` block: how the handler's rediss:// nodes are verified and how it
// authenticates to them. Files are read at provision (a reload reads them again).
type TLS struct {
	// CA lists PEM files of the CAs that sign the nodes' certificates (managed Redis,
	// private CAs). When given they REPLACE the system roots: a node must present a
	// certificate from one of these CAs, not from any public CA.
	CA []string `json:"ca,omitempty"`
	// ClientCert and ClientKey are PEM files of the client certificate and its key,
	// for nodes that require one (mutual TLS, tls-auth-clients yes).
	ClientCert string `json:"client_cert,omitempty"`
	ClientKey  string `json:"client_key,omitempty"`
	// ServerName is the name verified in every node's certificate instead of the host
	// of its URL (nodes addressed by IP whose certificates carry a DNS name).
	ServerName string `json:"server_name,omitempty"`
	// InsecureSkipVerify turns certificate verification off. For tests only; warned
	// about at provision.
	InsecureSkipVerify bool `json:"insecure_skip_verify,omitempty"`
}

// parseTLS reads a `tls { ... }` block.
func (h *Handler) parseTLS(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.Errf("redlock: tls: unexpected argument %q: options go in a block", d.Val())
	}
	t := &TLS{}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if seen[opt] {
			return d.Errf("redlock: tls: %s: given more than once", opt)
		}
		seen[opt] = true
		args := d.RemainingArgs()
		switch opt {
		case "ca":
			if len(args) == 0 {
				return d.Errf("redlock: tls: ca: want at least one PEM file")
			}
			t.CA = args
		case "client_cert":
			if len(args) != 2 {
				return d.Errf("redlock: tls: client_cert: want <cert-file> <key-file>, got %d arguments", len(args))
			}
			t.ClientCert, t.ClientKey = args[0], args[1]
		case "server_name":
			if len(args) != 1 {
				return d.Errf("redlock: tls: server_name: want exactly one name, got %d arguments", len(args))
			}
			t.ServerName = args[0]
		case "insecure_skip_verify":
			if len(args) != 0 {
				return d.Errf("redlock: tls: insecure_skip_verify: takes no argument")
			}
			t.InsecureSkipVerify = true
		default:
			return d.Errf("redlock: tls: unknown option %q", opt)
		}
	}
	h.TLS = t
	return nil
}

// check refuses an incomplete block without touching files (the Caddyfile adapter runs
// it too).
func (t *TLS) check() error {
	if t == nil {
		return nil
	}
	for _, f := range t.CA {
		if strings.TrimSpace(f) == "" {
			return fmt.Errorf("tls: ca: empty file name")
		}
	}
	if (t.ClientCert == "") != (t.ClientKey == "") {
		return fmt.Errorf("tls: client_cert: want both a certificate and a key file")
	}
	if t.ServerName != "" && strings.ContainsAny(t.ServerName, " /:") {
		return fmt.Errorf("tls: server_name: %q is not a host name", t.ServerName)
	}
	return nil
}

// load reads the files (placeholders such as {env.X} expanded) and builds the TLS
// config of the handler's rediss:// nodes, with a fingerprint of everything in it for
// the locker key (handlers that differ in TLS do not share connections; a rotated file
// makes a new locker on reload). nil when the block is absent.
func (t *TLS) load(urls []string) (*tls.Config, string, error) {
	if t == nil {
		return nil, "", nil
	}
	if !anyTLSNode(urls) {
		return nil, "", fmt.Errorf("tls: set, but no node uses rediss:// (the block applies to rediss:// nodes only)")
	}
	sum := sha256.New()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // the user's explicit, warned choice
	fmt.Fprintf(sum, "server_name=%q skip=%v\n", t.ServerName, t.InsecureSkipVerify)
	if len(t.CA) > 0 {
		cfg.RootCAs = x509.NewCertPool()
		for _, f := range t.CA {
			data, path, err := readTLSFile("ca", f)
			if err != nil {
				return nil, "", err
			}
			if !cfg.RootCAs.AppendCertsFromPEM(data) {
				return nil, "", fmt.Errorf("tls: ca: %s: no PEM certificate in it", path)
			}
			sum.Write(data)
		}
	}
	if t.ClientCert != "" {
		cert, certPath, err := readTLSFile("client_cert", t.ClientCert)
		if err != nil {
			return nil, "", err
		}
		key, keyPath, err := readTLSFile("client_cert", t.ClientKey)
		if err != nil {
			return nil, "", err
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, "", fmt.Errorf("tls: client_cert: %s and %s: %w", certPath, keyPath, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		sum.Write(cert)
		sum.Write(key)
	}
	return cfg, hex.EncodeToString(sum.Sum(nil)), nil
}

// readTLSFile expands placeholders in a file name and reads the file; errors name the
// option and the path.
func readTLSFile(opt, name string) ([]byte, string, error) {
	path, err := caddy.NewReplacer().ReplaceOrErr(name, true, true)
	if err != nil {
		return nil, name, fmt.Errorf("tls: %s: %s: %w", opt, name, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, path, fmt.Errorf("tls: %s: %w", opt, err) // the os error names the path
	}
	return data, path, nil
}

func anyTLSNode(urls []string) bool {
	for _, u := range urls {
		if strings.HasPrefix(strings.ToLower(u), "rediss://") {
			return true
		}
	}
	return false
}
