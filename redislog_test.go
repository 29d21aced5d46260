package caddyredlock

import (
	"net/http"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// go-redis's own messages (a failed dial to a node that is down) land in Caddy's log,
// as structured lines of the "redis" logger, instead of bare text on stderr.
func TestGoRedisLogsGoThroughCaddy(t *testing.T) {
	servers := redistest.StartN(t, 3)
	if err := servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", `
	redlock {
		`+redisLine(servers)+`
		prefix redislog:
	}
	`+proxyTo(up))
	c := &http.Client{Timeout: 10 * time.Second}
	if code, _, _ := get(t, c, "POST", s.url+"/a", nil); code != http.StatusOK {
		t.Fatalf("status %d with 2 of 3 nodes up, want 200", code)
	}
	if !eventually(5*time.Second, func() bool { return s.logContains(`"logger":"redis"`, "failed to dial") }) {
		t.Fatal(`no "redis" logger line about the failed dial in Caddy's log`)
	}
}
