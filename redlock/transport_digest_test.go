package redlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// waitDigests waits until a node told every script's digest (a client's first
// connection asks: internal/transport/digest.go).
func waitDigests(t testing.TB) {
	t.Helper()
	missing := ""
	if !eventually(5*time.Second, func() bool {
		missing = ""
		for _, s := range scripts.List() {
			if s.Digest() == "" {
				missing = s.Name()
			}
		}
		return missing == ""
	}) {
		t.Fatalf("the %s script's digest was never learned", missing)
	}
}

// The digests a client learns are the names Redis caches the scripts under: what SCRIPT
// LOAD answers (Redis computes both; this test computes no SHA-1 either).
func TestDigestsFromRedis(t *testing.T) {
	servers := redistest.StartN(t, 1)
	newTestClient(t, servers, fastOptions())
	waitDigests(t)
	rc := redis.NewClient(&redis.Options{Addr: servers[0].Addr()})
	defer rc.Close()
	for _, s := range scripts.List() {
		sha, err := rc.ScriptLoad(context.Background(), s.Src()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if s.Digest() != sha {
			t.Errorf("%s script: learned digest %q, SCRIPT LOAD says %q", s.Name(), s.Digest(), sha)
		}
	}
}

// Once the digests are known, locks cost one EVALSHA per script call and node: no
// EVAL with the text, no SCRIPT LOAD, no NOSCRIPT; after SCRIPT FLUSH each script goes
// once as EVAL on NOSCRIPT and then as EVALSHA again.
func TestScriptsRunByDigest(t *testing.T) {
	servers := redistest.StartN(t, 1)
	opt := fastOptions()
	opt.HealthInterval = time.Hour // no health check's announce (an EVAL) during the count
	c := newTestClient(t, servers, opt)
	waitUsable(t, c)
	waitDigests(t)
	ctx := context.Background()
	cycle := func(n int) {
		t.Helper()
		for i := range n {
			l, err := c.Acquire(ctx, "digest"+strconv.Itoa(i), AcquireOptions{Fencing: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.extend(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	cycle(1) // the scripts' first runs on this node, as EVALSHA after the probe's EVAL
	mustCommand(t, servers[0], "CONFIG", "RESETSTAT")
	const n = 10
	cycle(n)
	stats := commandStats(t, servers[0])
	// acquire, extend, release: 3 per cycle (the token needs no commit round here: fencing.go).
	if stats["cmdstat_evalsha"] != 3*n || stats["cmdstat_eval"] != 0 || stats["cmdstat_script|load"] != 0 || stats["errorstat_NOSCRIPT"] != 0 {
		t.Fatalf("after %d cycles: %v", n, stats)
	}
	mustCommand(t, servers[0], "SCRIPT", "FLUSH")
	mustCommand(t, servers[0], "CONFIG", "RESETSTAT")
	cycle(n)
	stats = commandStats(t, servers[0])
	// Each of the three scripts meets NOSCRIPT once, goes as EVAL, and is cached again.
	// (Whether Redis counts a refused EVALSHA among its calls varies with the version.)
	if stats["errorstat_NOSCRIPT"] != 3 || stats["cmdstat_eval"] != 3 || stats["cmdstat_evalsha"] < 3*n-3 {
		t.Fatalf("after SCRIPT FLUSH and %d cycles: %v", n, stats)
	}
}

func mustCommand(t testing.TB, s *redistest.Server, args ...string) string {
	t.Helper()
	out, err := s.Command(args...)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return out
}

// commandStats reads INFO commandstats and errorstats: calls per command, count per
// error prefix.
func commandStats(t testing.TB, s *redistest.Server) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, section := range []string{"commandstats", "errorstats"} {
		for _, line := range strings.Split(mustCommand(t, s, "INFO", section), "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok {
				continue
			}
			for _, f := range strings.Split(rest, ",") {
				if k, v, _ := strings.Cut(f, "="); k == "calls" || k == "count" {
					m[name], _ = strconv.Atoi(v)
				}
			}
		}
	}
	return m
}

// forgetDigests makes the scripts go as EVAL again until a node tells their digests.
func forgetDigests() {
	for _, s := range scripts.List() {
		s.ForgetDigest()
	}
}

// A user with exactly the docs' ACL line (EVAL and EVALSHA, no SCRIPT LOAD) learns
// the digests and runs the scripts by them.
func TestDigestsLearnedUnderDocsACLUser(t *testing.T) {
	servers := aclServers(t, 1, redistest.DocsACLSetUser(t, "locker", "s3cret"))
	forgetDigests()
	c, err := New(userURLs(servers, "locker", "s3cret"), fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitUsable(t, c)
	waitDigests(t)
	cycle := func() {
		t.Helper()
		l, err := c.Acquire(context.Background(), "acl", AcquireOptions{Fencing: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // a new node: each script meets NOSCRIPT once and goes as EVAL
	mustCommand(t, servers[0], "CONFIG", "RESETSTAT")
	cycle()
	if stats := commandStats(t, servers[0]); stats["cmdstat_evalsha"] != 2 || len(errorStats(stats)) > 0 {
		t.Fatalf("acquire and release under the ACL user: %v", stats)
	}
}

// errorStats keeps the errorstat_ entries of commandStats.
func errorStats(stats map[string]int) map[string]int {
	m := map[string]int{}
	for k, v := range stats {
		if strings.HasPrefix(k, "errorstat_") {
			m[k] = v
		}
	}
	return m
}
