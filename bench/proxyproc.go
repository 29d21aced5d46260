package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

// proxyOpts configures one Go reverse-proxy child (see rsproxy.go).
type proxyOpts struct {
	name               string
	redis              []string // none = plain proxy without a lock
	retryMin, retryMax time.Duration
	wait               time.Duration
}

// startProxy starts this binary as `proxy` with opts; its one site is "main".
func startProxy(dir, upstream string, o proxyOpts) (*frontend, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	args := []string{"proxy", "-listen", "127.0.0.1:" + strconv.Itoa(ports[0]),
		"-debug", "127.0.0.1:" + strconv.Itoa(ports[1]), "-upstream", upstream,
		"-redis", strings.Join(o.redis, ","), "-ttl", "10s", "-wait", o.wait.String()}
	if o.retryMin > 0 {
		args = append(args, "-retry-min", o.retryMin.String(), "-retry-max", o.retryMax.String())
	}
	logPath := filepath.Join(dir, o.name+".log")
	proc, err := childproc.Start(o.name, self, args, nil, "", logPath)
	if err != nil {
		return nil, err
	}
	f := &frontend{name: o.name, proc: proc, debug: baseURL(ports[1]),
		sites: map[string]string{"main": baseURL(ports[0])}, log: logPath}
	if err := f.waitReady(10 * time.Second); err != nil {
		f.stop()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return f, nil
}
