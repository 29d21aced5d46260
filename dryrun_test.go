package caddyredlock

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestDryRun: with dry_run, a request whose key is held (here by a streamed request of
// this instance, and by another Redlock client) goes through at once, unlocked, where it
// would have waited; it is counted in caddy_redlock_dry_run_total{reason="busy"} and
// logged with its key. A free key is still locked. With no quorum at all, requests go
// through too (reason="unavailable") instead of getting 503.
func TestDryRun(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	s := adminSite(t, servers, redistest.URLs(servers), "dry:", "dry_run", up)
	adm := newAdmClient(s)
	clients := nodeClients(t, servers, "")
	var sec secrets
	c := &http.Client{Timeout: 30 * time.Second}
	const dry = "caddy_redlock_dry_run_total"
	before := scrape(t, adm)

	holder := startStream(t, s.url+"/doc?d=3s")
	if !eventually(10*time.Second, func() bool { return adm.locks(t).Held == 1 }) {
		t.Fatal("the free key was not locked in dry run")
	}
	sec.collect(t, clients, "dry:/doc")
	start := time.Now()
	if code, body, _ := get(t, c, "GET", s.url+"/doc?d=0s&second=1", nil); code != 200 || !strings.HasSuffix(body, "done\n") {
		t.Errorf("would-be waiter: %d %q, want 200 served", code, tail(body, 1))
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("would-be waiter took %v: dry run must not wait", took)
	}
	release := holdKey(t, servers, "dry:", "/other", 5*time.Second)
	sec.collect(t, clients, "dry:/other")
	if code, _, _ := get(t, c, "GET", s.url+"/other?d=0s", nil); code != 200 {
		t.Errorf("key held by another client: %d, want 200", code)
	}
	release()
	after := scrape(t, adm)
	if d := metricValue(after, dry, `reason="busy"`) - max(metricValue(before, dry, `reason="busy"`), 0); d != 2 {
		t.Errorf("%s{reason=busy} grew by %v, want 2", dry, d)
	}
	if !s.logContains("redlock dry run", `"key":"/doc"`, `"reason":"busy"`) || !s.logContains("redlock dry run", `"key":"/other"`) {
		t.Error("no info log line names the keys dry run let through")
	}
	holder.wait(t, 20*time.Second)
	if holder.code != 200 || !strings.HasSuffix(holder.body, "done\n") {
		t.Errorf("holder: %d %v", holder.code, holder.err)
	}

	for _, srv := range servers[:2] {
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if code, body, _ := get(t, c, "GET", fmt.Sprintf("%s/u/%d?d=0s", s.url, i), nil); code != 200 {
			t.Errorf("without quorum: %d %q, want 200 (dry run never answers 503)", code, body)
		}
	}
	if v := metricValue(scrape(t, adm), dry, `reason="unavailable"`) - max(metricValue(before, dry, `reason="unavailable"`), 0); v != 3 {
		t.Errorf("%s{reason=unavailable} grew by %v, want 3", dry, v)
	}
	for _, srv := range servers[:2] {
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	noKeysLeft(t, servers, "dry:")
	logs, _ := os.ReadFile(s.logFile)
	sec.check(t, map[string]string{"caddy log": string(logs), "admin": adm.all()})
}

// TestDryRunLossLetsTheRequestGoOn: dry run never refuses or cuts a request, so a lock
// lost while its response streams (2 of 3 nodes paused past the validity) is counted
// (caddy_redlock_locks_lost_total, and caddy_redlock_dry_run_total{reason="lost"}) and
// logged, and the stream goes on to its end, uncancelled.
func TestDryRunLossLetsTheRequestGoOn(t *testing.T) {
	servers := redistest.StartN(t, 3)
	finish, letFinish := newGate(t)
	var cancelled atomic.Bool
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "line 1\n")
		w.(http.Flusher).Flush()
		select {
		case <-finish:
			io.WriteString(w, "done\n")
		case <-r.Context().Done():
			cancelled.Store(true)
		}
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix dryloss:
		ttl 1s
		node_timeout 200ms
		dry_run
	}
%s`, redisLine(servers), proxyStreaming(up)))
	name := map[string]string{"reason": "lost"}
	dryLostBefore := metricTotal(t, metrics.dryRun, name)

	resp, err := http.Get(s.url + "/live")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "line 1\n" {
		t.Fatalf("first line: %q %v", line, err)
	}
	for _, srv := range servers[:2] {
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	counted := eventually(10*time.Second, func() bool { return metricTotal(t, metrics.dryRun, name) > dryLostBefore })
	for _, srv := range servers[:2] {
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if !counted {
		t.Fatal("the loss was not counted as a dry run loss")
	}
	letFinish()
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "done\n" || cancelled.Load() {
		t.Errorf("after the loss: rest %q, %v, upstream cancelled %v; want the stream to end normally", rest, err, cancelled.Load())
	}
	if !s.logContains("redlock dry run: lock lost", `"key":"/live"`, `"reason":"expired"`) {
		t.Error("the loss was not logged")
	}
	noKeysLeft(t, servers, "dryloss:")
}
