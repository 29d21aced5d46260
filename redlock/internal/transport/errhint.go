package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// errorHints is a go-redis hook on every node client that rewrites the two kinds of
// error a misconfigured deployment produces, so that they say what to fix: TLS
// failures (untrusted CA, wrong name, refused client certificate) and ACL refusals
// (NOPERM, or a command refused inside a script, which Redis reports without naming
// it). The node is named by the callers (node errors are "addr: err"). The original
// error stays reachable with errors.Unwrap / errors.As.
type errorHints struct {
	tls     bool     // the node is reached over TLS
	scripts *Scripts // to name a script refused inside (aclHint)
}

func (errorHints) DialHook(next redis.DialHook) redis.DialHook { return next }

func (e errorHints) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		cmdErr := cmd.Err()
		if cmdErr == nil {
			cmdErr = err // a connection that could not be set up may leave cmd untouched
		}
		if h := e.hintFor(cmd, cmdErr); h != nil {
			cmd.SetErr(h)
			if err != nil {
				err = h
			}
		}
		return err
	}
}

func (e errorHints) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		var first error
		for _, cmd := range cmds {
			if h := e.hintFor(cmd, cmd.Err()); h != nil {
				cmd.SetErr(h)
				if first == nil {
					first = h
				}
			}
		}
		if err != nil {
			if first != nil {
				return first
			}
			// A connection that could not be set up fails Exec without touching the
			// cmds (batcher.exec relies on Exec's error then): hint that one too.
			if h := e.hintFor(nil, err); h != nil {
				return h
			}
		}
		return err
	}
}

// ConfigError is a node error only the operator can fix: a TLS failure, an ACL refusal or
// refused credentials, with what to check (Hint). The error from Redis or the connection
// stays reachable with errors.Unwrap / errors.As. A node with one is unusable, not down
// (Facts.LastErr, redlock's NodeStatus.LastErr; the permission probe, probe.go).
// redlock re-exports it as redlock.ConfigError (a type alias: the same type).
type ConfigError struct {
	Kind ConfigErrorKind
	Hint string
	Err  error
}

// ConfigErrorKind says which part of a deployment is wrong.
type ConfigErrorKind string

// The kinds of ConfigError.
const (
	ConfigTLS  ConfigErrorKind = "tls"  // the handshake failed: CA, name, client certificate, plain port
	ConfigACL  ConfigErrorKind = "acl"  // the user may not run a command, or use a key or channel
	ConfigAuth ConfigErrorKind = "auth" // the credentials were refused (WRONGPASS, NOAUTH)
)

func (e *ConfigError) Error() string { return e.Hint + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// hintFor returns err with a hint, or nil when there is nothing to add.
func (e errorHints) hintFor(cmd redis.Cmder, err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	if _, ok := errors.AsType[*ConfigError](err); ok {
		return nil // hinted already (OnConnect's error passes the hook twice)
	}
	if h := tlsHint(err, e.tls); h != "" {
		return &ConfigError{Kind: ConfigTLS, Hint: h, Err: err}
	}
	if h := aclHint(cmd, err, e.scripts); h != "" {
		return &ConfigError{Kind: ConfigACL, Hint: h, Err: err}
	}
	if msg := err.Error(); strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") {
		return &ConfigError{Kind: ConfigAuth, Hint: "redis auth: the node refused the credentials (user and password in the node URL)", Err: err}
	}
	return nil
}

// hintClientCert is one text for the ways a refused client certificate shows (an alert
// or a reset, depending on timing), so a node's problem is logged once, not per variant.
const hintClientCert = "TLS: the node refused or closed the connection; if this persists, it requires a client certificate it trusts (tls client_cert)"

// tlsHint explains a failed TLS handshake. With TLS 1.3 a server that refuses the
// client certificate does so after the client's handshake is done: the client then
// sees an alert on its first read, or a reset connection on its first write.
func tlsHint(err error, overTLS bool) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &unknown):
		return "TLS: the node's certificate is not signed by a trusted CA (set tls ca to the CA that signs it)"
	case errors.As(err, &hostname):
		return "TLS: the node's certificate is not valid for the name checked (set tls server_name to a name in the certificate)"
	case errors.As(err, &invalid):
		return "TLS: the node's certificate is not valid (expired, or not for server use)"
	case errors.As(err, &verify):
		return "TLS: the node's certificate failed verification"
	case errors.As(err, &alert), strings.Contains(msg, "remote error: tls:"):
		if strings.Contains(msg, "certificate") {
			return hintClientCert
		}
		return "TLS: the node refused the handshake"
	case strings.Contains(msg, "tls: first record does not look like a TLS handshake"):
		return "TLS: the node does not speak TLS on this port (use redis:// for a plain port)"
	}
	if overTLS && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)) {
		return hintClientCert
	}
	return ""
}

// aclHint explains an ACL refusal. A direct NOPERM names its command already; a command
// refused inside a script is reported as "ERR The user executing the script can't run
// this command", so the script (known by its digest or text) tells which commands to grant.
func aclHint(cmd redis.Cmder, err error, ss *Scripts) string {
	msg := err.Error()
	inScript := strings.Contains(msg, "user executing the script can't run this command")
	if !inScript && !strings.HasPrefix(msg, "NOPERM") {
		return ""
	}
	what := "the command"
	if cmd != nil {
		what = strings.ToUpper(cmd.Name())
		if s := scriptOf(cmd, ss); s != nil {
			what = fmt.Sprintf("%s of the %s script (it runs %s)", what, s.name, strings.Join(s.commands, ", "))
		}
	}
	if inScript {
		return "redis ACL: the user may not run a command inside " + what + "; grant the commands of the ACL SETUSER line in docs/connecting.md"
	}
	if strings.Contains(msg, "keys") || strings.Contains(msg, "channel") {
		return "redis ACL: the user may not use these keys or channels in " + what + "; grant ~<prefix>* and &<prefix>*"
	}
	return "redis ACL: the user may not run " + what + "; grant the commands of the ACL SETUSER line in docs/connecting.md"
}

// scriptOf finds our script in an EVAL (by its text) or EVALSHA (by its digest).
func scriptOf(cmd redis.Cmder, ss *Scripts) *Script {
	args := cmd.Args()
	if len(args) < 2 || ss == nil {
		return nil
	}
	body, _ := args[1].(string)
	if strings.EqualFold(cmd.Name(), "eval") {
		return ss.bySrc[body]
	}
	return ss.byDigest(strings.ToLower(body))
}
