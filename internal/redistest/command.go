package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// SocketURL returns "unix:///path/redis.sock", the server's unix socket (always plain,
// also for a TLS server), or "" when the server has none (Options.Args set unixsocket,
// or the temporary path was too long).
func (s *Server) SocketURL() string {
	if !s.useUnixSocket() {
		return ""
	}
	return "unix://" + s.sockPath()
}

// Command runs one command as the default user over the server's unix socket (so it
// works for TLS servers too) and returns a simple reply: status, integer or bulk
// string ("" for nil); an error reply is returned as an error. For set-up such as
// ACL SETUSER, CONFIG SET or SCRIPT FLUSH; it fails once requirepass is set.
func (s *Server) Command(args ...string) (string, error) {
	if !s.useUnixSocket() {
		return "", fmt.Errorf("redistest: server on port %d has no unix socket", s.port)
	}
	c, err := net.DialTimeout("unix", s.sockPath(), pingDialTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(pingIOTimeout)); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("redistest: empty reply to %s", args[0])
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redistest: %s: %s", args[0], line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("redistest: %s: unsupported reply %q", args[0], line)
}
