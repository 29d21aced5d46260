package transport

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redact"
)

// URL forms (go-redis's ParseURL; user, password and db as there):
//
//	redis://[user:pass@]host:port[/db]      plain TCP
//	rediss://[user:pass@]host:port[/db]     TLS (Config.TLS, else system roots)
//	unix://[user:pass@]/path/redis.sock[?db=N]
//	host:port                               plain TCP, no auth (credentials need a scheme)

// ParseURL checks a node URL's form without connecting and returns the address shown
// for the node (never with a password): redis:// or rediss:// with a host, unix:// with
// a socket path, or bare host:port (without credentials); a URL's skip_verify is refused (it silently turns
// certificate checks off). The error never shows a password.
func ParseURL(raw string) (addr string, err error) {
	_, addr, err = parseURL(raw)
	return addr, err
}

// parseURL is the one parser of node URLs (redlock.CheckNodeURL and New call it):
// go-redis's ParseURL, after the checks above.
func parseURL(raw string) (*redis.Options, string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, "", fmt.Errorf("redlock: empty node URL")
	}
	if !strings.Contains(raw, "://") {
		return parseHostPort(raw)
	}
	shown := redact.URL(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("redlock: node URL %q: not a valid URL", shown)
	}
	switch {
	case u.Query().Has("skip_verify"):
		return nil, "", fmt.Errorf("redlock: node URL %q: skip_verify in the URL is not accepted: it silently turns certificate checks off; use insecure_skip_verify in the tls block (Options.TLSConfig in the library; tests only)", shown)
	case u.Scheme == "unix" && (u.Path == "" || u.Path == "/"):
		return nil, "", fmt.Errorf("redlock: node URL %q: no socket path (unix:///path/redis.sock)", shown)
	case u.Scheme != "unix" && u.Scheme != "redis" && u.Scheme != "rediss":
		return nil, "", fmt.Errorf("redlock: node URL %q: scheme must be redis, rediss or unix", shown)
	case u.Scheme != "unix" && u.Hostname() == "":
		return nil, "", fmt.Errorf("redlock: node URL %q: no host", shown)
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		// go-redis quotes the URL in its error: keep a password out of it.
		msg := strings.ReplaceAll(err.Error(), raw, shown)
		return nil, "", fmt.Errorf("redlock: node URL %q: %s", shown, msg)
	}
	return opt, nodeAddr(opt), nil
}

// parseHostPort reads the bare host:port form: plain TCP, no auth. It carries no
// credentials: "default:pw@host:6379" or "pw@host:6379" is refused, never turned into an
// address that shows the password. Its errors never show the string either: one that is
// not host:port may be a password in the wrong place (a forgotten scheme or host); the
// caller names the node by its position.
func parseHostPort(raw string) (*redis.Options, string, error) {
	if strings.Contains(raw, "@") {
		return nil, "", errors.New("redlock: node URL without a scheme has credentials (a user or password before \"@\"): " +
			"write redis://user:password@host:port (rediss:// for TLS); the URL is not shown, as it holds a password")
	}
	host, port, err := net.SplitHostPort(raw)
	if err != nil || host == "" || !validPort(port) {
		return nil, "", errors.New("redlock: node URL: want redis://host:port, rediss://host:port, unix:///path or host:port " +
			"(the URL is not shown, as it may hold a password)")
	}
	opt := &redis.Options{Addr: raw}
	return opt, nodeAddr(opt), nil
}

// validPort reports whether port is a TCP port number, 1 to 65535.
func validPort(port string) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n <= 65535 && port[0] != '+'
}

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
