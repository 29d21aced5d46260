package transport

import (
	"crypto/tls"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"
)

// This file turns a node's parsed URL and the Config into its go-redis client: the
// timeouts the lock's safety relies on, the TLS settings of rediss:// nodes and the
// owner's Build.

// prepare sets what every node client must have: every command bounded by the node
// timeout, no retries (a retried SET would double the time spent; Redlock retries
// itself), RESP2, and onConnect before a connection carries anything.
func (n *Node) prepare(opt *redis.Options) {
	t := n.cfg.NodeTimeout
	opt.DialTimeout = t
	opt.ReadTimeout = t
	opt.WriteTimeout = t
	opt.PoolTimeout = t
	opt.DialerRetries = 1
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = true
	opt.Protocol = 2
	opt.DisableIdentity = true
	opt.OnConnect = n.onConnect
	applyTLS(opt, n.cfg.TLS)
}

// applyTLS gives a rediss:// node the owner's TLS settings: a clone of cfg per node,
// with the node's host as the name to verify unless cfg names one (nodes addressed by
// IP whose certificates carry a DNS name). A URL's skip_verify=true is kept (TLSWarning
// says so). Other nodes are left alone.
func applyTLS(opt *redis.Options, cfg *tls.Config) {
	if opt.TLSConfig == nil || cfg == nil {
		return
	}
	skip := opt.TLSConfig.InsecureSkipVerify
	t := cfg.Clone()
	if t.ServerName == "" {
		if host, _, err := net.SplitHostPort(opt.Addr); err == nil {
			t.ServerName = host
		}
	}
	t.InsecureSkipVerify = t.InsecureSkipVerify || skip
	opt.TLSConfig = t
}

// buildClient makes the node's go-redis client, with the owner's Build if set, and adds
// the hook that makes TLS and ACL errors say what to fix (errhint.go).
func buildClient(opt *redis.Options, cfg Config) (*redis.Client, error) {
	var c *redis.Client
	if cfg.Build != nil {
		var err error
		if c, err = cfg.Build(opt); err != nil {
			return nil, fmt.Errorf("redlock: ClientBuilder for %s: %w", nodeAddr(opt), err)
		}
		if c == nil {
			return nil, fmt.Errorf("redlock: ClientBuilder for %s returned no client", nodeAddr(opt))
		}
	} else {
		c = redis.NewClient(opt)
	}
	c.AddHook(errorHints{tls: opt.TLSConfig != nil, scripts: cfg.Scripts})
	return c, nil
}

// TLSWarning says when the node's certificate is not checked (insecure_skip_verify or a
// URL's skip_verify=true): anyone on the path can then impersonate the node; or when TLS
// settings were given but the node is reached without TLS (a redis:// URL by mistake).
// "" when neither.
func (n *Node) TLSWarning() string {
	t := n.client.Options().TLSConfig
	if t == nil {
		if n.cfg.TLS != nil {
			return fmt.Sprintf("node %s: TLS settings are given but the node is reached without TLS (use rediss:// for TLS)", n.addr)
		}
		return ""
	}
	if !t.InsecureSkipVerify {
		return ""
	}
	return fmt.Sprintf("node %s: TLS certificate verification is off (insecure_skip_verify): anyone on the network path can impersonate the node; use it for tests only", n.addr)
}
