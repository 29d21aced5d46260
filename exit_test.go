package caddyredlock

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// A Caddy that exits right after answering still releases the lock: the release runs
// after the response (in the background), and an exiting Caddy waits for it. With one
// node of three paused, that release first waits up to a node timeout for the acquire's
// late reply, so without the wait the process would be gone and the key would stand for
// its whole ttl (30s here) on the nodes that are up.
func TestExitWaitsForBackgroundRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	p := startCaddyProc(t, fmt.Sprintf(`
	redlock {
		%s
		prefix exit:
		ttl 30s
		node_timeout 800ms
	}
%s`, redisLine(servers), proxyTo(up)))
	c := &http.Client{Timeout: 10 * time.Second}
	if code, _, _ := get(t, c, "POST", p.url+"/warm", nil); code != 200 { // connections up
		t.Fatalf("warm-up: %d", code)
	}
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[2].Resume()
	if code, _, _ := get(t, c, "POST", p.url+"/item", nil); code != 200 {
		t.Fatalf("status %d with 2 of 3 nodes answering", code)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("caddy did not exit")
	}
	noKeysLeft(t, servers[:2], "exit:")
}
