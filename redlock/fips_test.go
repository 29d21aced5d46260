package redlock

import (
	"context"
	"crypto/fips140"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// fipsNodesEnv hands the child process its nodes' URLs (space-separated), and tells
// TestFIPSOnly that it runs as its own child.
const fipsNodesEnv = "REDLOCK_FIPS_TEST_NODES"

// The package works in FIPS 140-only mode, where computing SHA-1 in Go panics (internal/transport/digest.go).
// GODEBUG=fips140 is read when a process starts, so this test runs itself again in a new
// process of this test binary with GODEBUG=fips140=only, on nodes it started, and the
// child exercises the package (fipsChild). The whole binary runs in that mode: a package
// init that hashes (go-redis's NewScript did) fails the child before any test.
func TestFIPSOnly(t *testing.T) {
	if nodes := os.Getenv(fipsNodesEnv); nodes != "" {
		fipsChild(t, strings.Fields(nodes))
		return
	}
	servers := redistest.StartN(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFIPSOnly$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=only", fipsNodesEnv+"="+strings.Join(redistest.URLs(servers), " "))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestFIPSOnly (") {
		t.Fatalf("child under GODEBUG=fips140=only: %v\n%s", err, out)
	}
}

// fipsChild is TestFIPSOnly in its child process, in FIPS 140-only mode: every kind of
// lock, with fencing, renewal, release notices, force release, and after SCRIPT FLUSH.
func fipsChild(t *testing.T, urls []string) {
	if !fips140.Enforced() {
		t.Fatal("not in FIPS 140-only mode: is GODEBUG=fips140=only set?")
	}
	exerciseFeatures(t, urls, notifyOptions()) // plain, fencing, renewal, notices, shared, force release
	c, err := New(urls, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer closeForGood(c)
	waitUsable(t, c)
	ctx := context.Background()
	var places []*Lock
	for i := range 2 {
		l, err := c.Acquire(ctx, "limited", AcquireOptions{Limit: 2, Fencing: true})
		if err != nil {
			t.Fatalf("limit place %d: %v", i, err)
		}
		places = append(places, l)
	}
	if _, err := c.Acquire(ctx, "limited", AcquireOptions{Limit: 2}); !isBusy(err) {
		t.Fatalf("a third holder of a limit 2 key: %v", err)
	}
	for _, l := range places {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	all, err := c.AcquireAll(ctx, []string{"acct:2", "acct:1"}, AcquireOptions{Fencing: true})
	if err != nil || len(all) != 2 {
		t.Fatalf("AcquireAll: %v, %v", all, err)
	}
	for _, l := range all {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// After SCRIPT FLUSH every script meets NOSCRIPT once and goes again as EVAL.
	for _, u := range urls {
		flushScripts(t, u)
	}
	for i := range 3 {
		l, err := c.Acquire(ctx, "after-flush", AcquireOptions{Fencing: true})
		if err != nil {
			t.Fatalf("Acquire %d after SCRIPT FLUSH: %v", i, err)
		}
		if _, err := l.extend(ctx); err != nil {
			t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// flushScripts empties the script cache of the node at url (a redistest URL) and
// checks that the node then answered NOSCRIPT: the EVALSHA path was in use.
func flushScripts(t *testing.T, url string) {
	t.Helper()
	c, err := New([]string{url}, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer closeForGood(c)
	tr := c.nodes[0].tr
	ctx := context.Background()
	if err := tr.Do(ctx, "script", "flush").Err(); err != nil {
		t.Fatal(err)
	}
	errorstats := func() string {
		s, _ := tr.Do(ctx, "info", "errorstats").Text()
		return s
	}
	before := errorCount(t, errorstats(), "NOSCRIPT")
	l, err := c.Acquire(ctx, "flushed", AcquireOptions{})
	if err != nil {
		t.Fatalf("Acquire after SCRIPT FLUSH: %v", err)
	}
	_ = l.Release(ctx)
	if after := errorCount(t, errorstats(), "NOSCRIPT"); after <= before {
		t.Fatalf("no NOSCRIPT after SCRIPT FLUSH (%d, then %d): scripts did not go as EVALSHA", before, after)
	}
}

// errorCount reads one error prefix's count from INFO errorstats.
func errorCount(t *testing.T, info, prefix string) int {
	t.Helper()
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+prefix+":count="); ok {
			n, err := strconv.Atoi(rest)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
