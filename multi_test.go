package caddyredlock

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestTwoInstances: two Caddy processes on the same 5 nodes never let two requests for
// one key overlap at the upstream, and run requests for different keys in parallel.
func TestTwoInstances(t *testing.T) {
	servers := redistest.StartN(t, 5)
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		d := 10 * time.Millisecond
		if strings.HasPrefix(r.URL.Path, "/k/") {
			d = 300 * time.Millisecond
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "ok")
	})
	body := fmt.Sprintf(`
	redlock {
		%s
		prefix multi:
		ttl 2s
		node_timeout 200ms
		wait 30s
		path /hot/* hot
		path /k/{n} k:{n}
		fencing
	}
%s`, redisLine(servers), proxyTo(up))
	a, b := startCaddyProc(t, body), startCaddyProc(t, body)

	run := func(n int, url func(i int) string) map[int]int {
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &http.Client{Timeout: 60 * time.Second}
				code, _, _ := get(t, c, "POST", url(i), nil)
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		return codes
	}

	// One key, 60 requests, half through each instance, all at once.
	codes := run(60, func(i int) string {
		if i%2 == 0 {
			return fmt.Sprintf("%s/hot/%d", a.url, i)
		}
		return fmt.Sprintf("%s/hot/%d", b.url, i)
	})
	hits, overlaps, maxInside := up.snapshot()
	if codes[200] != 60 {
		t.Errorf("one key: statuses %v, want 60 x 200", codes)
	}
	if overlaps != 0 || maxInside != 1 {
		t.Errorf("one key: %d overlaps, %d inside at once (want 0 and 1) over %d requests", overlaps, maxInside, hits)
	}
	up.mu.Lock()
	tokens := append([]string(nil), up.tokens["hot"]...)
	up.mu.Unlock()
	for i := 1; i < len(tokens); i++ {
		if len(tokens[i]) < len(tokens[i-1]) || (len(tokens[i]) == len(tokens[i-1]) && tokens[i] <= tokens[i-1]) {
			t.Errorf("fencing tokens not increasing in upstream order: %s then %s", tokens[i-1], tokens[i])
		}
	}

	// Eight keys at once through both instances: they run side by side.
	codes = run(8, func(i int) string {
		if i%2 == 0 {
			return fmt.Sprintf("%s/k/%d", a.url, i)
		}
		return fmt.Sprintf("%s/k/%d", b.url, i)
	})
	_, overlaps, maxInside = up.snapshot()
	if codes[200] != 8 {
		t.Errorf("eight keys: statuses %v", codes)
	}
	if overlaps != 0 {
		t.Errorf("eight keys: %d same-key overlaps", overlaps)
	}
	if maxInside < 2 {
		t.Errorf("requests for different keys never ran at the same time (at most %d inside)", maxInside)
	}
	t.Logf("different keys: up to %d inside at once", maxInside)
	noKeysLeft(t, servers, "multi:")
}
