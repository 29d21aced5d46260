package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

// buildCaddy builds cmd/caddy once into dir (optionally with the race detector).
func buildCaddy(repo, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "caddy")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/caddy")...)
	cmd.Dir = repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/caddy in %s: %w\n%s", repo, err, out)
	}
	return bin, nil
}

// site is what a Caddy instance serves; the runner changes nodeTimeout on reloads.
type site struct {
	inst        int
	port        int
	adminPort   int
	urls        []string
	upstream    string
	ttl         time.Duration
	wait        time.Duration
	nodeTimeout time.Duration
	logPath     string
	storage     string
	logLevel    string
}

// caddyfile renders the instance's Caddyfile: a redlock handler with fencing per route
// (/r/{id} exclusive, and the lock modes' routes: modes.go), then reverse_proxy to the
// checking upstream, passing the lock key, the mode and the instance number.
func (s site) caddyfile() string {
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	grace_period 2s
	storage file_system %s
	log {
		output file %s
		format json
		level %s
	}
}

http://127.0.0.1:%d {
	bind 127.0.0.1
%s	reverse_proxy %s {
		header_up %s {http.redlock.key}
		header_up %s {http.redlock.mode}
		header_up %s %d
		header_up %s {http.redlock.wait_ms}
		flush_interval -1
	}
}
`, s.adminPort, s.storage, s.logPath, s.logLevel, s.port, modeRoutes(s.lockOptions()),
		s.upstream, headerKey, headerMode, headerInst, s.inst, headerWait)
}

// lockOptions are the options every route's redlock handler has (one locker for all).
func (s site) lockOptions() string {
	return fmt.Sprintf("\t\tredis %s\n\t\tprefix chaos:\n\t\tttl %s\n\t\twait %s\n\t\tnode_timeout %s\n\t\tfencing\n",
		strings.Join(s.urls, " "), s.ttl, s.wait, s.nodeTimeout)
}

// instance is one cmd/caddy process.
type instance struct {
	site
	bin  string
	dir  string
	proc *childproc.Child
}

func (in *instance) url() string   { return "http://127.0.0.1:" + strconv.Itoa(in.port) }
func (in *instance) admin() string { return "http://127.0.0.1:" + strconv.Itoa(in.adminPort) }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startInstance writes the Caddyfile and runs `caddy run` until it listens.
func startInstance(bin, root string, s site) (*instance, error) {
	dir := filepath.Join(root, fmt.Sprintf("caddy%d", s.inst))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	if s.adminPort, err = freePort(); err != nil {
		return nil, err
	}
	s.logPath = filepath.Join(dir, "caddy.log")
	s.storage = filepath.Join(dir, "storage")
	in := &instance{site: s, bin: bin, dir: dir}
	cfg := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(s.caddyfile()), 0o600); err != nil {
		return nil, err
	}
	env := []string{"XDG_CONFIG_HOME=" + dir, "XDG_DATA_HOME=" + dir, "HOME=" + dir}
	in.proc, err = childproc.Start(fmt.Sprintf("caddy%d", s.inst), bin,
		[]string{"run", "--config", cfg, "--adapter", "caddyfile"}, env, dir, filepath.Join(dir, "stderr.log"))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
		if err == nil {
			c.Close()
			return in, nil
		}
		if in.proc.Exited() || time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "stderr.log"))
			in.proc.Stop(time.Second)
			return nil, fmt.Errorf("caddy%d did not start listening: %v\n%s", s.inst, err, tail(string(b), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (in *instance) pause() error  { return in.proc.Signal(syscall.SIGSTOP) }
func (in *instance) resume() error { return in.proc.Signal(syscall.SIGCONT) }

// reload posts the site, with nodeTimeout, to the admin endpoint as a Caddyfile (what
// `caddy reload` does).
func (in *instance) reload(ctx context.Context, nodeTimeout time.Duration) error {
	s := in.site
	s.nodeTimeout = nodeTimeout
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", in.admin()+"/load", bytes.NewReader([]byte(s.caddyfile())))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("caddy%d POST /load: %w", in.inst, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("caddy%d POST /load: %s: %s", in.inst, resp.Status, b)
	}
	in.site.nodeTimeout = nodeTimeout
	return nil
}

// logLines returns the lines of the instance's log that contain every part.
func (in *instance) logLines(parts ...string) []string {
	b, err := os.ReadFile(in.logPath)
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		ok := line != ""
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
