package caddyredlock

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Hole 3 of safety round 5: a block in handle_errors served under the lock its request
// holds (the shape docs/configuration.md recommends for a fallback). Caddy runs error
// routes with its own request and writer once the holder's handler has returned, so
// only the served block can cut them: a force release during the fallback must stop it
// (under.go), or the next request's fallback overlaps it.
func TestLossCutsBlockServedInErrorRoute(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 3*time.Second, nil)
	block := coverBlock(servers, "key res")
	s := startCaddy(t, "", fmt.Sprintf(`
	root * %s
	%s
	file_server
	handle_errors 404 {
		%s
		%s
	}`, t.TempDir(), block, block, proxyTo(up)))
	c := &http.Client{Timeout: 20 * time.Second}
	lostBefore := metricTotal(t, metrics.lost, map[string]string{"reason": "force_released"})
	first := sendAsync(t, c, s.url+"/a", "first")
	if !eventually(3*time.Second, func() bool { hits, _, _ := up.snapshot(); return hits == 1 }) {
		t.Fatal("the first fallback never reached the upstream")
	}
	forceRelease(t, s, "res")
	if !eventually(3*time.Second, func() bool {
		return metricTotal(t, metrics.lost, map[string]string{"reason": "force_released"}) > lostBefore
	}) {
		t.Fatal("the loss was never counted")
	}
	// The first fallback stops at once with the fix; without, it works on for 3 s.
	eventually(time.Second, func() bool { return up.insideNow() == 0 })
	second := sendAsync(t, c, s.url+"/b", "second")
	if code := <-first; code != http.StatusServiceUnavailable {
		t.Errorf("first: %d, want 503 (its lock was lost during the fallback)", code)
	}
	<-second
	if _, overlaps, _ := up.snapshot(); overlaps != 0 {
		t.Errorf("%d overlaps in the upstream:\n%s", overlaps, strings.Join(up.overlapLog, "\n"))
	}
}

// forceRelease force-releases key through s's admin API. The API asks every locker of
// the process, and one left by an earlier test (its requests still draining, its nodes
// stopped) answers 503 until its last request is done: the call is repeated until all
// answer, for at most 5 s.
func forceRelease(t *testing.T, s *site, key string) {
	t.Helper()
	adm := newAdmClient(s)
	var code int
	var body []byte
	if !eventually(5*time.Second, func() bool {
		code, body, _ = adm.do(t, "DELETE", "/redlock/keys?key="+url.QueryEscape(key))
		return code == http.StatusOK
	}) {
		t.Fatalf("force release of %q: %d %s", key, code, body)
	}
}
