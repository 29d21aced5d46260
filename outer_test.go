package caddyredlock

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Rule 1 for the routes Caddy runs after the handler (outer.go): a handle_errors route
// with no redlock block of its own, proxying the fallback while the request's lock is
// held. A force release during it cancels its proxy (the route's context is the one the
// lock's watch cuts), so the next request's fallback never overlaps it. Found by the
// explorer (the templates and subrouteerrors shapes).
func TestLossCutsErrorRoute(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 3*time.Second, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	root * %s
	%s
	file_server
	handle_errors 404 {
		%s
	}`, t.TempDir(), coverBlock(servers, "key res"), proxyTo(up)))
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
	eventually(time.Second, func() bool { return up.insideNow() == 0 })
	second := sendAsync(t, c, s.url+"/b", "second")
	if code := <-first; code == http.StatusOK {
		t.Errorf("first: %d: its fallback ran on after its lock was lost", code)
	}
	<-second
	if _, overlaps, _ := up.snapshot(); overlaps != 0 {
		t.Errorf("%d overlaps in the upstream:\n%s", overlaps, strings.Join(up.overlapLog, "\n"))
	}
}
