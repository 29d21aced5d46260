package caddyredlock

import (
	"fmt"
	"net/http"
	"path/filepath"
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

// The redlock package's own lines (here: a node restarted) are lines of the
// "http.handlers.redlock" logger in Caddy's log, like the handler's, and they follow a
// reload that moves Caddy's log elsewhere although the redlock client outlives it.
func TestRedlockPackageLinesCarryTheLoggerName(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	body := fmt.Sprintf(`
	redlock {
		%s
		prefix redlocklog:
	}
%s`, redisLine(servers), proxyTo(up))
	s := startCaddy(t, "", body)
	restarted := func(i int) []string {
		return []string{`"logger":"` + moduleID + `"`, `"level":"warn"`, "may have lost its keys", `"cause":"restart"`,
			`"node":"` + servers[i].Addr() + `"`, `"quarantined_until"`}
	}
	adm := newAdmClient(s)
	waitRestartSeen := func(i int) {
		t.Helper()
		// A restart is a run_id change: the client must have seen the first one.
		if !eventually(10*time.Second, func() bool {
			var a nodesAnswer
			adm.json(t, "GET", "/redlock/nodes", &a)
			return len(a.Lockers) == 1 && a.Lockers[0].Nodes[i].RunID != ""
		}) {
			t.Fatalf("node %d's run_id never seen", i)
		}
		if err := servers[i].Restart(); err != nil {
			t.Fatal(err)
		}
		if !eventually(10*time.Second, func() bool { return s.logContains(restarted(i)...) }) {
			t.Fatalf("no line %q in Caddy's log %s", restarted(i), s.logFile)
		}
	}
	waitRestartSeen(0)

	// The same handler config keeps its redlock client; the log goes to a new file.
	s.logFile = filepath.Join(t.TempDir(), "caddy2.log")
	s.reload(t, body)
	waitRestartSeen(1)
}
