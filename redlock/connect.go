package redlock

import (
	"fmt"
	"net"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// This file turns a node URL and the Options into the node's go-redis client: the
// address shown for it, the TLS settings of rediss:// nodes and the caller's
// ClientBuilder. URL forms (go-redis's ParseURL; user, password and db as there):
//
//	redis://[user:pass@]host:port[/db]      plain TCP
//	rediss://[user:pass@]host:port[/db]     TLS (Options.TLSConfig, else system roots)
//	unix://[user:pass@]/path/redis.sock[?db=N]
//	host:port                               plain TCP, no auth

// nodeAddr is how a node is shown in logs, errors and the admin API: host:port[/db] or
// unix:///path[/db], never a password.
func nodeAddr(opt *redis.Options) string {
	addr := opt.Addr
	if opt.Network == "unix" {
		addr = "unix://" + addr
	}
	if opt.DB != 0 {
		addr += "/" + strconv.Itoa(opt.DB)
	}
	return addr
}

// applyTLS gives a rediss:// node the caller's TLS settings: a clone of TLSConfig per
// node, with the node's host as the name to verify unless TLSConfig names one (nodes
// addressed by IP whose certificates carry a DNS name). A URL's skip_verify=true is kept
// (New warns about it). Other nodes are left alone.
func applyTLS(opt *redis.Options, cfg Options) {
	if opt.TLSConfig == nil || cfg.TLSConfig == nil {
		return
	}
	skip := opt.TLSConfig.InsecureSkipVerify
	t := cfg.TLSConfig.Clone()
	if t.ServerName == "" {
		if host, _, err := net.SplitHostPort(opt.Addr); err == nil {
			t.ServerName = host
		}
	}
	t.InsecureSkipVerify = t.InsecureSkipVerify || skip
	opt.TLSConfig = t
}

// buildClient makes the node's go-redis client, with the caller's ClientBuilder if set,
// and adds the hook that makes TLS and ACL errors say what to fix (errhint.go).
func buildClient(opt *redis.Options, cfg Options) (*redis.Client, error) {
	var c *redis.Client
	if cfg.ClientBuilder != nil {
		var err error
		if c, err = cfg.ClientBuilder(opt); err != nil {
			return nil, fmt.Errorf("redlock: ClientBuilder for %s: %w", nodeAddr(opt), err)
		}
		if c == nil {
			return nil, fmt.Errorf("redlock: ClientBuilder for %s returned no client", nodeAddr(opt))
		}
	} else {
		c = redis.NewClient(opt)
	}
	c.AddHook(errorHints{tls: opt.TLSConfig != nil})
	return c, nil
}

// tlsWarning says when a node's certificate is not checked (insecure_skip_verify or a
// URL's skip_verify=true): anyone on the path can then impersonate the node; or when TLS
// settings were given but the node is reached without TLS (a redis:// URL by mistake).
func tlsWarning(n *node) string {
	t := n.client.Options().TLSConfig
	if t == nil {
		if n.c.opt.TLSConfig != nil {
			return fmt.Sprintf("node %s: TLS settings are given but the node is reached without TLS (use rediss:// for TLS)", n.addr)
		}
		return ""
	}
	if !t.InsecureSkipVerify {
		return ""
	}
	return fmt.Sprintf("node %s: TLS certificate verification is off (insecure_skip_verify): anyone on the network path can impersonate the node; use it for tests only", n.addr)
}
