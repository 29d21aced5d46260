package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

// frontend is one HTTP front-end process (Caddy or the Go proxy) with its sites.
type frontend struct {
	name  string
	proc  *childproc.Child
	debug string            // base URL serving /debug/pprof and /debug/vars
	sites map[string]string // site name -> base URL
	log   string
}

func (f *frontend) stop() { f.proc.Stop(stopGrace) }

// waitReady waits until every site accepts connections and the debug endpoint answers.
func (f *frontend) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	pending := []string{f.debug}
	for _, s := range f.sites {
		pending = append(pending, s)
	}
	for _, u := range pending {
		for {
			if f.proc.Exited() {
				return fmt.Errorf("%s: %w (log: %s)", f.name, errExited, f.log)
			}
			resp, err := http.Get(u + "/debug/vars")
			if err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %s not ready after %v: %v (log: %s)", f.name, u, timeout, err, f.log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func baseURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
