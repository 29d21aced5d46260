package caddyredlock

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestReloadUnderLoad: config reloads (POST /load, what `caddy reload` does) while
// requests wait for and hold locks lose no request, never let two requests for one key
// overlap, and leave no key behind. The configs alternate node_timeout, so every reload
// also switches to a new locker while the old one still serves its last requests.
//
// On Linux, Caddy gives each config its own SO_REUSEPORT listener; when the old one
// closes, the kernel resets connections still queued on it, before Caddy has read a byte
// of them (see LWN "The SO_REUSEPORT socket option"). Such a request never reached
// Caddy, so it is retried and counted separately; a request that did reach Caddy (it is
// in the access log) and failed is a lost request.
func TestReloadUnderLoad(t *testing.T) {
	servers := redistest.StartN(t, 5)
	up := newUpstream(t, 10*time.Millisecond, nil)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	body := func(name, nodeTimeout string) string {
		return fmt.Sprintf(`
	redlock {
		%s
		prefix reload:
		ttl 2s
		node_timeout %s
		wait 20s
	}
	header X-Config %s
	log {
		output file %s
		format json
	}
%s`, redisLine(servers), nodeTimeout, name, accessLog, proxyTo(up))
	}
	s := startCaddy(t, "", body("a", "200ms"))

	const workers = 8
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	configs := map[string]int{}
	failed := map[string]error{} // request id -> error of a try that got no response
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 30 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				for try := 0; try < 5; try++ {
					id := fmt.Sprintf("w%d-%d-%d", w, i, try)
					req, _ := http.NewRequest("GET", fmt.Sprintf("%s/r/%d", s.url, (w+i)%3), nil)
					req.Header.Set("X-Req-Id", id)
					resp, err := c.Do(req)
					mu.Lock()
					if err != nil {
						failed[id] = err
						mu.Unlock()
						continue
					}
					statuses[resp.StatusCode]++
					configs[resp.Header.Get("X-Config")]++
					mu.Unlock()
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					break
				}
			}
		}()
	}
	// Each config serves a share of the load before the next reload (and the last one
	// before the load stops): 30 responses of its own.
	served := func(cfg string) {
		t.Helper()
		mu.Lock()
		before := configs[cfg]
		mu.Unlock()
		if !eventually(20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return configs[cfg] >= before+30 }) {
			t.Errorf("config %s served no 30 responses under load", cfg)
		}
	}
	served("a")
	for i, cfg := range []string{"b", "a", "b", "a"} {
		nt := "200ms"
		if cfg == "b" {
			nt = "300ms"
		}
		s.reload(t, body(cfg, nt))
		t.Logf("reload %d done", i+1)
		served(cfg)
	}
	close(stop)
	wg.Wait()

	logged, err := os.ReadFile(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	for id, err := range failed {
		if strings.Contains(string(logged), `"X-Req-Id":["`+id+`"]`) {
			t.Errorf("request %s reached Caddy but got no response: %v", id, err)
		}
	}
	if len(statuses) != 1 || statuses[200] == 0 {
		t.Errorf("statuses: %v, want only 200", statuses)
	}
	if configs["a"] == 0 || configs["b"] == 0 {
		t.Errorf("responses per config: %v (the reloads did not take effect)", configs)
	}
	hits, overlaps, _ := up.snapshot()
	t.Logf("%d requests, statuses %v, per config %v; %d connections reset by listener handoffs and retried",
		hits, statuses, configs, len(failed))
	if overlaps != 0 {
		t.Errorf("%d requests entered the upstream while another with the same key was inside: %q", overlaps, up.overlapLog)
		if dir := os.Getenv("REDLOCK_TEST_KEEP_LOGS"); dir != "" {
			_ = os.WriteFile(filepath.Join(dir, "access.log"), logged, 0o644)
		}
	}
	noKeysLeft(t, servers, "reload:")
	if !eventually(5*time.Second, func() bool { return len(inflightRequests()) == 0 && len(lockers()) == 1 }) {
		t.Errorf("after the reloads: %d requests in flight, %d lockers (want 0 and 1)", len(inflightRequests()), len(lockers()))
	}
}
