package caddyredlock

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// (Found by review.) A 4xx from the next handler may come after the request went
// somewhere: request_body's max_size on a streamed (chunked) body
// fails only once the proxy has already sent the headers and part of the body to the
// upstream: reverse_proxy then returns the 413 HandlerError (caddyhttp.Error keeps the
// inner one). The upstream, like the database transaction of TestProxyTimeoutDrains,
// may already be working and ignore the broken body: the lock must drain, or the next
// request overlaps it at the upstream.
func TestStreamedBodyTooLargeDrains(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond) // its work: started on the headers, deaf to the body
		fmt.Fprint(w, "done")
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	route {
		redlock {
			%s
			prefix bodytoolarge:
			ttl 2s
			wait 10s
		}
		request_body {
			max_size 1KB
		}
		reverse_proxy %s {
			header_up X-Lock-Key {http.redlock.key}
		}
	}`, redisLine(servers), up.addr))

	c := &http.Client{Timeout: 15 * time.Second}
	upstreamStarted := func() bool { hits, _, _ := up.snapshot(); return hits >= 1 }
	codes := make([]int, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		pr, pw := io.Pipe()
		go func() {
			pw.Write(bytes.Repeat([]byte("a"), 512))
			// The rest once the upstream has the headers and started (the test fails below
			// if it never does).
			eventually(10*time.Second, upstreamStarted)
			pw.Write(bytes.Repeat([]byte("b"), 4096))
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", s.url+"/tx", pr) // unknown length: chunked
		resp, err := c.Do(req)
		if err != nil {
			t.Errorf("first request: %v", err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[0] = resp.StatusCode
	})
	// The second request once the first holds the lock and reached the upstream.
	if !eventually(10*time.Second, upstreamStarted) {
		t.Fatal("the first request never reached the upstream")
	}
	wg.Go(func() {
		codes[1], _, _ = get(t, c, "POST", s.url+"/tx", nil)
	})
	wg.Wait()
	t.Logf("codes %v", codes)
	if hits, overlaps, _ := up.snapshot(); overlaps != 0 {
		t.Fatalf("%d overlaps at the upstream in %d hits (first request answered %d): the lock was handed on while the upstream still worked",
			overlaps, hits, codes[0])
	}
}
