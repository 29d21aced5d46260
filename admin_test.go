package caddyredlock

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/metrics" // the admin API's /metrics route
	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// The admin API tests run a real Caddy with its real admin endpoint, real redis-server
// processes and a real streaming upstream. Every admin response they read is kept, and
// at the end checked, with Caddy's log and /metrics, for the lock values read straight
// from Redis while the locks were held: no route, log line or metric may show one.

// admClient calls the admin API and keeps every response body.
type admClient struct {
	base string
	c    *http.Client

	mu     sync.Mutex
	bodies []string
}

func newAdmClient(s *site) *admClient {
	return &admClient{base: s.admin, c: &http.Client{Timeout: 20 * time.Second}}
}

// do sends method path and returns the status, the body and the Allow header.
func (a *admClient) do(t testing.TB, method, path string) (int, []byte, string) {
	t.Helper()
	req, err := http.NewRequest(method, a.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := a.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	a.mu.Lock()
	a.bodies = append(a.bodies, string(b))
	a.mu.Unlock()
	return resp.StatusCode, b, resp.Header.Get("Allow")
}

// json sends method path, wants 200 and decodes the body into v.
func (a *admClient) json(t testing.TB, method, path string, v any) {
	t.Helper()
	code, b, _ := a.do(t, method, path)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s %s: %v\n%s", method, path, err, b)
	}
}

func (a *admClient) locks(t testing.TB) locksJSON {
	t.Helper()
	var v locksJSON
	a.json(t, "GET", "/redlock/locks", &v)
	return v
}

func (a *admClient) all() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.bodies, "\n")
}

// nodeClients opens a plain go-redis client per server (for checks behind Caddy's back).
func nodeClients(t testing.TB, servers []*redistest.Server, password string) []*redis.Client {
	t.Helper()
	out := make([]*redis.Client, len(servers))
	for i, s := range servers {
		out[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), Password: password, MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
		t.Cleanup(func() { _ = out[i].Close() })
	}
	return out
}

// secrets collects lock values read from Redis during a test.
type secrets struct {
	mu     sync.Mutex
	values map[string]bool
}

// collect reads redisKey on every node and keeps the values found; it returns how many
// nodes had it.
func (s *secrets) collect(t testing.TB, clients []*redis.Client, redisKey string) int {
	t.Helper()
	n := 0
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := c.Get(ctx, redisKey).Result()
		cancel()
		if err != nil || v == "" {
			continue
		}
		n++
		s.mu.Lock()
		if s.values == nil {
			s.values = map[string]bool{}
		}
		s.values[v] = true
		s.mu.Unlock()
	}
	return n
}

// check fails the test if any text contains a lock value, or a long random part of one
// (values are a random owner id and a counter).
func (s *secrets) check(t testing.TB, texts map[string]string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.values) == 0 {
		t.Fatal("no lock value was read from Redis: the secrets check would prove nothing")
	}
	for v := range s.values {
		needles := []string{v}
		for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == '-' || r == '.' }) {
			if len(part) >= 12 {
				needles = append(needles, part)
			}
		}
		for name, text := range texts {
			for _, nd := range needles {
				if strings.Contains(text, nd) {
					t.Errorf("%s contains a lock value (%d chars)", name, len(nd))
				}
			}
		}
	}
	t.Logf("checked %d lock values against %d texts", len(s.values), len(texts))
}

// stream is a streamed GET running in the background.
type stream struct {
	done   chan struct{}
	code   int
	body   string
	err    error
	cancel context.CancelFunc
}

func startStream(t *testing.T, url string) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	st := &stream{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(st.done)
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			st.err = err
			return
		}
		defer resp.Body.Close()
		st.code = resp.StatusCode
		b, err := io.ReadAll(resp.Body)
		st.body, st.err = string(b), err
	}()
	t.Cleanup(func() {
		cancel()
		<-st.done
	})
	return st
}

// wait waits for the stream to end.
func (st *stream) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-st.done:
	case <-time.After(timeout):
		t.Fatalf("request still running after %v", timeout)
	}
}

// adminSite runs Caddy with one redlock handler (ttl 1500ms unless extra sets it) in
// front of up.
func adminSite(t *testing.T, servers []*redistest.Server, urls []string, prefix, extra string, up *upstream) *site {
	t.Helper()
	if !strings.Contains(extra, "ttl ") {
		extra += "\n\t\tttl 1500ms"
	}
	return startCaddy(t, "", fmt.Sprintf(`
	redlock {
		redis %s
		prefix %s
		node_timeout 200ms
		wait 30s
		%s
	}
%s`, strings.Join(urls, " "), prefix, extra, proxyStreaming(up)))
}

// TestAdminLocks: while a streamed request holds a key and two more wait for it,
// /redlock/locks shows one held (validity left, renewals going up) and two waiting;
// once they are done, nothing.
func TestAdminLocks(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	s := adminSite(t, servers, redistest.URLs(servers), "adml:", "", up)
	adm := newAdmClient(s)
	clients := nodeClients(t, servers, "")
	var sec secrets

	holder := startStream(t, s.url+"/doc?d=4s")
	var l locksJSON
	if !eventually(10*time.Second, func() bool { l = adm.locks(t); return l.Held == 1 }) {
		t.Fatalf("the streamed request never showed as held: %+v", l)
	}
	sec.collect(t, clients, "adml:/doc")
	w1, w2 := startStream(t, s.url+"/doc?d=0s&w=1"), startStream(t, s.url+"/doc?d=0s&w=2")
	if !eventually(10*time.Second, func() bool { l = adm.locks(t); return l.Held == 1 && l.Waiting == 2 }) {
		t.Fatalf("want 1 held and 2 waiting, got %+v", l)
	}
	var held lockJSON
	for _, e := range l.Locks {
		if e.Key != "/doc" {
			t.Errorf("unexpected key in %+v", e)
		}
		if e.Waiters != 2 {
			t.Errorf("waiters = %d, want 2 in %+v", e.Waiters, e)
		}
		if e.Method != "GET" || e.RemoteAddr == "" || e.Locker == "" || e.Since.IsZero() {
			t.Errorf("incomplete entry %+v", e)
		}
		switch e.State {
		case stateHeld:
			held = e
		case stateWaiting:
			if e.ValidityMS != 0 || e.HeldMS != 0 || !e.HeldSince.IsZero() || !strings.HasPrefix(e.URI, "/doc?d=0s&w=") {
				t.Errorf("waiting entry %+v", e)
			}
		}
	}
	if held.URI != "/doc?d=4s" || held.ValidityMS <= 0 || held.ValidityMS > 1500 || held.HeldSince.IsZero() {
		t.Errorf("held entry %+v: want uri /doc?d=4s and 0 < validity_ms <= 1500", held)
	}
	// Renewals go up (every 500ms) while the stream runs.
	first := held.Renewals
	if !eventually(5*time.Second, func() bool {
		for _, e := range adm.locks(t).Locks {
			if e.State == stateHeld && e.URI == held.URI && e.Renewals > first && e.ValidityMS > 0 {
				return true
			}
		}
		return false
	}) {
		t.Errorf("renewals stayed at %d", first)
	}
	sec.collect(t, clients, "adml:/doc")

	for _, r := range []*stream{holder, w1, w2} {
		r.wait(t, 30*time.Second)
		if r.err != nil || r.code != 200 || !strings.HasSuffix(r.body, "done\n") {
			t.Errorf("request: %d %v %q", r.code, r.err, tail(r.body, 1))
		}
	}
	if !eventually(10*time.Second, func() bool { l = adm.locks(t); return len(l.Locks) == 0 }) {
		t.Errorf("locks left after the requests ended: %+v", l)
	}
	if l.Held != 0 || l.Waiting != 0 || l.Draining != 0 || l.Locks == nil {
		t.Errorf("empty answer %+v: want zero counts and an empty list", l)
	}
	noKeysLeft(t, servers, "adml:")
	logs, _ := os.ReadFile(s.logFile)
	sec.check(t, map[string]string{"admin responses": adm.all(), "caddy log": string(logs)})
}

type nodesAnswer struct {
	Lockers []struct {
		Locker string     `json:"locker"`
		Name   string     `json:"name"`
		Prefix string     `json:"prefix"`
		Quorum int        `json:"quorum"`
		Up     int        `json:"up"`
		Nodes  []nodeJSON `json:"nodes"`
	} `json:"lockers"`
}

// TestAdminNodes: /redlock/nodes follows a node that is paused (SIGSTOP) and resumed,
// shows a restarted node's new run_id and its quarantine until it ends, and never shows
// the password that is in the node URLs.
func TestAdminNodes(t *testing.T) {
	skipShort(t)
	password := "pw-" + rand.Text()
	servers := redistest.StartN(t, 3, redistest.Options{Args: []string{"--requirepass", password}})
	urls := make([]string, len(servers))
	for i, srv := range servers {
		urls[i] = fmt.Sprintf("redis://:%s@%s", password, srv.Addr())
	}
	up := newUpstream(t, 0, nil)
	// A ttl of 4s: the quarantine after a restart lasts that long, long enough to see it
	// even on a busy machine.
	s := adminSite(t, servers, urls, "admn:", "ttl 4s", up)
	adm := newAdmClient(s)

	node := func(addr string) (nodeJSON, bool) {
		var a nodesAnswer
		adm.json(t, "GET", "/redlock/nodes", &a)
		if len(a.Lockers) != 1 {
			t.Fatalf("want one locker, got %+v", a)
		}
		for _, n := range a.Lockers[0].Nodes {
			if n.Address == addr {
				return n, true
			}
		}
		t.Fatalf("node %s not listed in %+v", addr, a)
		return nodeJSON{}, false
	}
	var a nodesAnswer
	// All up and voting. A node first seen less than a ttl after its start, when the
	// others' start (known to the second) already looks older than that, is held back
	// for what is left of its ttl (the young-node rule): a test starting slowly can see it.
	if !eventually(10*time.Second, func() bool {
		a = nodesAnswer{} // decoding into the old answer would keep its omitted fields
		adm.json(t, "GET", "/redlock/nodes", &a)
		if len(a.Lockers) != 1 || a.Lockers[0].Up != 3 {
			return false
		}
		for _, n := range a.Lockers[0].Nodes {
			if !n.QuarantinedUntil.IsZero() {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("nodes never all up and voting: %+v", a)
	}
	lk := a.Lockers[0]
	if lk.Quorum != 2 || lk.Prefix != "admn:" || len(lk.Nodes) != 3 {
		t.Errorf("locker %+v", lk)
	}
	for i, n := range lk.Nodes {
		if n.Address != servers[i].Addr() || !n.Checked || !n.Voting || n.RunID == "" || n.LastRTTMS <= 0 || n.LastCheck.IsZero() || !n.QuarantinedUntil.IsZero() {
			t.Errorf("node %d: %+v", i, n)
		}
	}

	t.Run("paused and resumed", func(t *testing.T) {
		addr := servers[0].Addr()
		before, _ := node(addr)
		if err := servers[0].Pause(); err != nil {
			t.Fatal(err)
		}
		var n nodeJSON
		if !eventually(15*time.Second, func() bool { n, _ = node(addr); return !n.Up }) {
			t.Fatalf("paused node still up: %+v", n)
		}
		if n.Voting || n.LastError == "" || n.LastErrorAt.IsZero() || n.Errors <= before.Errors {
			t.Errorf("paused node without its error: %+v", n)
		}
		if err := servers[0].Resume(); err != nil {
			t.Fatal(err)
		}
		if !eventually(15*time.Second, func() bool { n, _ = node(addr); return n.Up }) {
			t.Fatalf("resumed node still down: %+v", n)
		}
		if n.RunID != before.RunID || !n.QuarantinedUntil.IsZero() {
			t.Errorf("a paused node is the same server (no quarantine): before %+v, after %+v", before, n)
		}
	})

	t.Run("restarted", func(t *testing.T) {
		addr := servers[1].Addr()
		before, _ := node(addr)
		if err := servers[1].Restart(); err != nil {
			t.Fatal(err)
		}
		var n nodeJSON
		if !eventually(15*time.Second, func() bool { n, _ = node(addr); return n.RunID != before.RunID && n.RunID != "" }) {
			t.Fatalf("new run_id never seen: before %+v, now %+v", before, n)
		}
		// Quarantine = largest ttl + drift (4s + 42ms here) from when the new run_id was seen.
		if n.QuarantinedUntil.IsZero() || n.QuarantinedLeftMS <= 0 || n.QuarantinedLeftMS > 4100 || n.Voting {
			t.Errorf("restarted node not quarantined for about a ttl: %+v", n)
		}
		if !eventually(15*time.Second, func() bool { n, _ = node(addr); return n.QuarantinedUntil.IsZero() && n.Up }) {
			t.Errorf("quarantine never ended: %+v", n)
		}
		if n.QuarantinedLeftMS != 0 || !n.Voting {
			t.Errorf("quarantine_left_ms = %d after the quarantine", n.QuarantinedLeftMS)
		}
	})

	_, metricsText, _ := adm.do(t, "GET", "/metrics")
	for name, text := range map[string]string{"admin responses": adm.all(), "/metrics": string(metricsText)} {
		if strings.Contains(text, password) {
			t.Errorf("%s shows the Redis password", name)
		}
	}
	if !strings.Contains(string(metricsText), `node="`+servers[1].Addr()+`"`) {
		t.Errorf("/metrics has no node label for %s", servers[1].Addr())
	}
}

type keysAnswer struct {
	Key     string `json:"key"`
	Status  string `json:"status"`
	Lockers []struct {
		Locker     string        `json:"locker"`
		Prefix     string        `json:"prefix"`
		RedisKey   string        `json:"redis_key"`
		Status     string        `json:"status"`
		PresentOn  int           `json:"present_on"`
		QuorumHeld bool          `json:"quorum_held"`
		HeldHere   bool          `json:"held_here"`
		Holder     *holderJSON   `json:"holder"`
		Waiters    int           `json:"waiters"`
		Nodes      []keyNodeJSON `json:"nodes"`
	} `json:"lockers"`
}

// TestAdminKeys: /redlock/keys agrees with what is in Redis, for a key held here, a key
// held by another Redlock client, and an unknown key; DELETE frees the key on every node
// for good and cuts the local holder's streaming request.
func TestAdminKeys(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	s := adminSite(t, servers, redistest.URLs(servers), "admk:", "fencing", up)
	adm := newAdmClient(s)
	clients := nodeClients(t, servers, "")
	var sec secrets

	// compare checks one /redlock/keys answer against Redis, node by node.
	compare := func(t *testing.T, key string, ttl time.Duration, a keysAnswer) {
		t.Helper()
		if len(a.Lockers) != 1 {
			t.Fatalf("want one locker: %+v", a)
		}
		lk := a.Lockers[0]
		if a.Key != key || lk.RedisKey != "admk:"+key || len(lk.Nodes) != len(servers) {
			t.Fatalf("answer %+v", a)
		}
		present := 0
		for i, c := range clients {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			pttl, err := c.PTTL(ctx, lk.RedisKey).Result()
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			n := lk.Nodes[i]
			inRedis := pttl != -2*time.Nanosecond && pttl >= 0 // go-redis gives -2 (ns) for a missing key
			if n.Node != servers[i].Addr() || n.Present != inRedis {
				t.Errorf("node %s: admin says present=%v, Redis PTTL %v", servers[i].Addr(), n.Present, pttl)
			}
			if inRedis {
				present++
				if n.PTTLMS <= 0 || n.PTTLMS > ttl.Milliseconds() || pttl > ttl {
					t.Errorf("node %s: pttl_ms %d, Redis %v, ttl %v", n.Node, n.PTTLMS, pttl, ttl)
				}
			}
		}
		if lk.PresentOn != present {
			t.Errorf("present_on %d, Redis has it on %d nodes", lk.PresentOn, present)
		}
	}
	// onAll waits for the key to be on every node: an acquire returns on a quorum, the
	// last node's SET may land a moment later.
	onAll := func(t *testing.T, redisKey string) {
		t.Helper()
		if !eventually(5*time.Second, func() bool { return len(lockKeysOn(t, servers, redisKey)) == len(servers) }) {
			t.Fatalf("%s not on every node: %q", redisKey, lockKeysOn(t, servers, redisKey))
		}
	}
	inspect := func(key string) keysAnswer {
		var a keysAnswer
		adm.json(t, "GET", "/redlock/keys?key="+key, &a)
		return a
	}

	holder := startStream(t, s.url+"/doc?d=30s")
	var a keysAnswer
	if !eventually(10*time.Second, func() bool { a = inspect("/doc"); return a.Status == keyHeld }) {
		t.Fatalf("/doc never held: %+v", a)
	}
	sec.collect(t, clients, "admk:/doc")

	t.Run("held here", func(t *testing.T) {
		onAll(t, "admk:/doc")
		a := inspect("/doc")
		compare(t, "/doc", ttl, a)
		lk := a.Lockers[0]
		if !lk.QuorumHeld || !lk.HeldHere || lk.PresentOn != 3 || lk.Holder == nil {
			t.Fatalf("want quorum held, here, on 3 nodes with a holder: %+v", lk)
		}
		for _, n := range lk.Nodes {
			if !n.HeldHere {
				t.Errorf("node %s does not hold our value: %+v", n.Node, n)
			}
		}
		h := lk.Holder
		if h.State != stateHeld || h.Token <= 0 || h.URI != "/doc?d=30s" || h.ValidityMS <= 0 || h.Method != "GET" {
			t.Errorf("holder %+v", h)
		}
	})

	t.Run("held elsewhere", func(t *testing.T) {
		release := holdKey(t, servers, "admk:", "/other", 5*time.Second)
		defer release()
		onAll(t, "admk:/other")
		sec.collect(t, clients, "admk:/other")
		a := inspect("/other")
		compare(t, "/other", 5*time.Second, a)
		lk := a.Lockers[0]
		if a.Status != keyHeld || !lk.QuorumHeld || lk.HeldHere || lk.Holder != nil {
			t.Errorf("want held by someone else: %+v", lk)
		}
	})

	t.Run("unknown key", func(t *testing.T) {
		a := inspect("/nobody/has/this")
		compare(t, "/nobody/has/this", ttl, a)
		if a.Status != keyNotHeld || a.Lockers[0].PresentOn != 0 || a.Lockers[0].QuorumHeld {
			t.Errorf("want not held: %+v", a)
		}
	})

	t.Run("partial", func(t *testing.T) {
		// Two different values on two nodes, one without expiry: no quorum holds one value.
		ctx := context.Background()
		if err := clients[0].Set(ctx, "admk:/stale", "v1", 5*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		if err := clients[1].Set(ctx, "admk:/stale", "v2", 0).Err(); err != nil {
			t.Fatal(err)
		}
		defer clients[1].Del(ctx, "admk:/stale")
		a := inspect("/stale")
		lk := a.Lockers[0]
		if a.Status != keyPartial || lk.Status != keyPartial || lk.PresentOn != 2 || lk.QuorumHeld || lk.HeldHere {
			t.Fatalf("want partial on 2 nodes: %+v", a)
		}
		if n := lk.Nodes[0]; !n.Present || n.PTTLMS <= 0 || n.PTTLMS > 5000 {
			t.Errorf("node 0: %+v", n)
		}
		if n := lk.Nodes[1]; !n.Present || n.PTTLMS != -1 {
			t.Errorf("node 1 (no expiry): %+v", n)
		}
		if n := lk.Nodes[2]; n.Present || n.PTTLMS != 0 {
			t.Errorf("node 2 (absent): %+v", n)
		}
	})

	t.Run("force release", func(t *testing.T) {
		lostBefore := metricTotal(t, metrics.lost, nil)
		var r releaseJSON
		adm.json(t, "DELETE", "/redlock/keys?key=/doc", &r)
		// deleted_on may be below 3: the aborted request releases its own lock at once,
		// racing the force release's DEL on each node.
		if r.Status != "released" || len(r.Lockers) != 1 {
			t.Fatalf("force release answer %+v", r)
		}
		if lr := r.Lockers[0]; !lr.HeldHere || lr.Answered != 3 || lr.Token <= 0 || len(lr.Errors) != 0 {
			t.Errorf("locker %+v", lr)
		}
		holder.wait(t, 10*time.Second)
		if strings.HasSuffix(holder.body, "done\n") {
			t.Error("the holder's stream ran to its end after a force release")
		}
		if !eventually(5*time.Second, func() bool { _, ok := st.cancelledAt("/doc"); return ok }) {
			t.Error("the upstream never saw the holder's request cancelled")
		}
		if metricTotal(t, metrics.lost, nil) == lostBefore {
			t.Error("force release not counted as a lost lock")
		}
		// Gone on every node, and it stays gone: the aborted request's drain must not
		// renew it back (renewals run every 500ms).
		noKeysLeft(t, servers, "admk:/doc")
		// A negative check, so a sleep: two renewal intervals pass (nothing marks that no
		// renewal will come).
		time.Sleep(1200 * time.Millisecond)
		if left := lockKeysOn(t, servers, "admk:/doc"); len(left) != 0 {
			t.Errorf("the key came back after the force release: %q", left)
		}
		if a := inspect("/doc"); a.Status != keyNotHeld {
			t.Errorf("after force release: %+v", a)
		}
		// Free for the next request right away.
		c := &http.Client{Timeout: 10 * time.Second}
		if code, body, _ := get(t, c, "GET", s.url+"/doc?d=0s", nil); code != 200 {
			t.Errorf("next request: %d %q", code, body)
		}
		if !eventually(3*time.Second, func() bool {
			return s.logContains(`"level":"warn"`, "force-released by operator", `"key":"/doc"`, `"remote_addr":"127.0.0.1:`)
		}) {
			t.Error("force release not logged at warn with the admin client's address")
		}
		if !s.logContains("lock lost", `"reason":"force_released"`, "/doc?d=30s") {
			t.Error("the aborted request not logged")
		}
	})

	t.Run("force release of a key held elsewhere", func(t *testing.T) {
		holdKey(t, servers, "admk:", "/ext", 5*time.Second)
		onAll(t, "admk:/ext")
		sec.collect(t, clients, "admk:/ext")
		var r releaseJSON
		adm.json(t, "DELETE", "/redlock/keys?key=/ext", &r)
		if r.Status != "released" || r.DeletedOn != 3 || r.Lockers[0].HeldHere {
			t.Errorf("answer %+v", r)
		}
		var again releaseJSON
		adm.json(t, "DELETE", "/redlock/keys?key=/never-held", &again)
		if again.Status != keyNotHeld || again.DeletedOn != 0 {
			t.Errorf("force release of an unknown key: %+v", again)
		}
	})

	_, metricsText, _ := adm.do(t, "GET", "/metrics")
	logs, _ := os.ReadFile(s.logFile)
	sec.check(t, map[string]string{"admin responses": adm.all(), "caddy log": string(logs), "/metrics": string(metricsText)})
}

// TestAdminErrors: wrong methods get 405 with Allow, a missing key 400, an unknown key
// 200 "not held"; errors are Caddy's JSON {"error": ...}.
func TestAdminErrors(t *testing.T) {
	servers := redistest.StartN(t, 1)
	up := newUpstream(t, 0, nil)
	s := adminSite(t, servers, redistest.URLs(servers), "adme:", "", up)
	adm := newAdmClient(s)

	for _, c := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"POST", "/redlock/locks", 405, "GET"},
		{"DELETE", "/redlock/locks", 405, "GET"},
		{"PUT", "/redlock/nodes", 405, "GET"},
		{"POST", "/redlock/keys?key=/a", 405, "DELETE, GET"},
		{"GET", "/redlock/keys", 400, ""},
		{"GET", "/redlock/keys?key=", 400, ""},
		{"DELETE", "/redlock/keys", 400, ""},
		{"GET", "/redlock/keys?key=/a&key=/b", 400, ""},
		{"GET", "/redlock/keys?key=%00", 400, ""},
	} {
		code, body, allow := adm.do(t, c.method, c.path)
		var e struct {
			Error string `json:"error"`
		}
		if code != c.code || allow != c.allow || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%s %s: %d %q (Allow %q), want %d with a JSON error (Allow %q)", c.method, c.path, code, body, allow, c.code, c.allow)
		}
	}
	var a keysAnswer
	adm.json(t, "GET", "/redlock/keys?key=/unknown", &a)
	if a.Status != keyNotHeld || len(a.Lockers) != 1 || a.Lockers[0].Status != keyNotHeld {
		t.Errorf("unknown key: %+v", a)
	}
	code, body, _ := adm.do(t, "GET", "/redlock/keys?key=/unknown")
	if code != 200 || !strings.Contains(string(body), `"status": "not held"`) {
		t.Errorf("unknown key: %d %s", code, body)
	}
}
