package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

// caddySite is one site block of a bench Caddyfile: a plain reverse_proxy, or redlock on
// the given nodes in front of it.
type caddySite struct {
	name  string
	redis []string // none = plain reverse_proxy
	wait  time.Duration
	ttl   time.Duration // 0: 10s
	opts  string        // more redlock options (lock modes), one per line
	// modeHeaders passes the lock key and mode to the upstream (the modes phase judges
	// them).
	modeHeaders bool
}

// caddyMainPath is where the colleague's cmd/caddy lives, relative to the repo root.
const caddyMainPath = "cmd/caddy/main.go"

// buildCaddy builds the repo's cmd/caddy into dir and returns the binary's path.
func buildCaddy(repo, dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(repo, caddyMainPath)); err != nil {
		return "", fmt.Errorf("%s does not exist yet", caddyMainPath)
	}
	out := filepath.Join(dir, "caddy")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/caddy")
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/caddy: %v\n%s", err, b)
	}
	return out, nil
}

// caddyfile renders a Caddyfile with one block per site on the given ports.
func caddyfile(adminPort int, upstream string, sites []caddySite, ports []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{\n\tadmin localhost:%d\n\tpersist_config off\n\tauto_https off\n}\n", adminPort)
	for i, s := range sites {
		fmt.Fprintf(&b, "\n:%d {\n\tbind 127.0.0.1\n", ports[i])
		if len(s.redis) > 0 {
			ttl := s.ttl
			if ttl == 0 {
				ttl = 10 * time.Second
			}
			fmt.Fprintf(&b, "\tredlock {\n\t\tredis %s\n\t\tpath /r/{id} res:{id}\n\t\tttl %s\n\t\twait %s\n%s\t}\n",
				strings.Join(s.redis, " "), ttl, s.wait, s.opts)
		}
		if s.modeHeaders {
			fmt.Fprintf(&b, "\treverse_proxy %s {\n\t\theader_up X-Lock-Key {http.redlock.key}\n\t\theader_up X-Lock-Mode {http.redlock.mode}\n\t}\n}\n", upstream)
		} else {
			fmt.Fprintf(&b, "\treverse_proxy %s\n}\n", upstream)
		}
	}
	return b.String()
}

// startCaddy runs `caddy run` with a generated Caddyfile in its own directory.
func startCaddy(bin, dir, name, upstream string, sites []caddySite) (*frontend, error) {
	cdir := filepath.Join(dir, name)
	if err := mkdir(cdir); err != nil {
		return nil, err
	}
	ports, err := freePorts(len(sites) + 1)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(cdir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(caddyfile(ports[0], upstream, sites, ports[1:])), 0o644); err != nil {
		return nil, err
	}
	env := []string{"HOME=" + cdir, "XDG_DATA_HOME=" + cdir, "XDG_CONFIG_HOME=" + cdir}
	logPath := filepath.Join(cdir, "log")
	proc, err := childproc.Start(name, bin, []string{"run", "--config", cfg, "--adapter", "caddyfile"}, env, "", logPath)
	if err != nil {
		return nil, err
	}
	f := &frontend{name: name, proc: proc, debug: "http://localhost:" + strconv.Itoa(ports[0]),
		sites: map[string]string{}, log: logPath}
	for i, s := range sites {
		f.sites[s.name] = baseURL(ports[i+1])
	}
	if err := f.waitReady(20 * time.Second); err != nil {
		f.stop()
		return nil, fmt.Errorf("caddy: %w", err)
	}
	return f, nil
}
