package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/internal/testwait"
	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// scriptNode is a transport node on s, to run the scripts by themselves (not through a
// Client): the node's own connection, as a round would use.
func scriptNode(t testing.TB, s *redistest.Server) *transport.Node {
	t.Helper()
	tr, err := transport.New(s.URL(), transport.Config{NodeTimeout: 5 * time.Second, Scripts: scripts,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// fastOptions keep tests quick: short ttl and timeouts, quick health checks.
func fastOptions() Options {
	// The node timeout is loose: the race detector on 2 shared cores makes cold
	// connections slow, and these tests are about correctness, not speed.
	return Options{TTL: 2 * time.Second, NodeTimeout: 300 * time.Millisecond, RetryDelayMin: 5 * time.Millisecond,
		RetryDelayMax: 20 * time.Millisecond, HealthInterval: 50 * time.Millisecond}
}

func newTestClient(t testing.TB, servers []*redistest.Server, opt Options) *Client {
	t.Helper()
	c, err := New(redistest.URLs(servers), opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { closeForGood(c) })
	firstContact(c)
	return c
}

// closeForGood closes c and releases the locks the test left held: Close alone leaves
// a client that holds a lock alive until the lock ends (health checks, renewals), and a
// client outliving its test is noise at best in the tests that follow.
func closeForGood(c *Client) {
	_ = c.Close()
	c.heldMu.Lock()
	var held []*Lock
	for _, ls := range c.held {
		held = append(held, ls...)
	}
	c.heldMu.Unlock()
	for _, l := range held {
		ctx, cancel := context.WithTimeout(context.Background(), 3*c.opt.NodeTimeout)
		_ = l.Release(ctx)
		cancel()
	}
}

// firstContact waits (up to 3 s, without failing) until the client has read the data
// marker of every node that answers: a test's next client then finds the nodes marked
// and shares this one's fresh start, as a second Caddy instance does. Clients created at
// the same moment on brand-new nodes split the marks between them, and the nodes would
// wait a quarantine before they vote (voting.go, "Fresh start").
func firstContact(c *Client) {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		done := true
		for i, n := range c.nodes {
			if !n.markerRead.Load() && !(c.Status().Nodes[i].Checked && !c.Status().Nodes[i].Up) {
				done = false
			}
		}
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond) // polls the client's own progress: no event to wait on
	}
}

// waitRunIDs waits until the client's health checks have seen every running node's run_id,
// so a later restart is recognised.
func waitRunIDs(t testing.TB, c *Client) {
	t.Helper()
	if !eventually(5*time.Second, func() bool {
		for _, s := range c.Status().Nodes {
			if s.RunID == "" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("health checks did not see every run_id: %+v", c.Status().Nodes)
	}
}

// rawKeys returns what each node holds under the lock key: value ("" if absent) or an error string.
func rawGet(t testing.TB, s *redistest.Server, key string) (string, bool) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
	defer rc.Close()
	v, err := rc.Get(context.Background(), defaultPrefix+key).Result()
	if err == redis.Nil {
		return "", false
	}
	if err != nil {
		t.Fatalf("GET on %s: %v", s.Addr(), err)
	}
	return v, true
}

// eventually is the tests' one poll helper (internal/testwait, shared with the plugin's
// tests): it polls cond until it holds or timeout passes, and reports whether it held.
var eventually = testwait.Eventually

// fmtSscanCalls reads calls=N from an INFO commandstats line.
func fmtSscanCalls(line string, calls *int) (int, error) {
	_, rest, _ := strings.Cut(line, ":")
	return fmt.Sscanf(rest, "calls=%d", calls)
}

// waitGone waits until no node holds key: a release returns once a quorum deleted it, the
// other nodes' deletes follow.
func waitGone(t testing.TB, servers []*redistest.Server, key string) {
	t.Helper()
	if !eventually(3*time.Second, func() bool {
		for _, s := range servers {
			if _, ok := rawGet(t, s, key); ok {
				return false
			}
		}
		return true
	}) {
		t.Fatal("timed out waiting for: " + key + " gone from every node")
	}
}

func isBusy(err error) bool {
	_, ok := errors.AsType[*BusyError](err)
	return ok
}

func isUnavailable(err error) bool {
	_, ok := errors.AsType[*UnavailableError](err)
	return ok
}

// skipShort skips a multi-second scenario in the quick inner loop (go test -short);
// `make test` and CI run everything.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a multi-second scenario: skipped with -short")
	}
}

// watching reports whether c waits for key's release notices with its subscription
// confirmed by enough nodes that no release can slip past (watch.ready): from then on a
// release wakes it, asleep or trying (every copy of the notice wakes a waiter that tried
// since the last: notify.go). A barrier for tests that release while someone waits.
func watching(c *Client, key string) bool {
	c.notices.mu.Lock()
	w := c.notices.m[c.names(key).channel]
	c.notices.mu.Unlock()
	if w == nil {
		return false
	}
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

// waitChecks waits until the client's health checks ran n more times on every node
// (each node's LastCheck moved n times): a test that must see checks go by without an
// effect (one event or one log line per transition, not per check) waits for them. A
// poll may miss a check between two polls: it then waits for one more, never less.
func waitChecks(t testing.TB, c *Client, n int) {
	t.Helper()
	nodes := c.Status().Nodes
	last, seen := make([]time.Time, len(nodes)), make([]int, len(nodes))
	for i, s := range nodes {
		last[i] = s.LastCheck
	}
	if !eventually(10*time.Second, func() bool {
		done := true
		for i, s := range c.Status().Nodes {
			if !s.LastCheck.Equal(last[i]) {
				seen[i]++
				last[i] = s.LastCheck
			}
			done = done && seen[i] >= n
		}
		return done
	}) {
		t.Fatalf("health checks seen per node: %v, want %d more each", seen, n)
	}
}

// waitingReaders is how many readers of c contend for key in Redis (readGroups.wait).
func waitingReaders(c *Client, key string) int {
	c.readers.mu.Lock()
	defer c.readers.mu.Unlock()
	return c.readers.waiting[key]
}

// tryCounter counts the acquire tries a client sends to each node, through a go-redis
// hook on its connections (Options.ClientBuilder): a barrier for tests that release a key
// only once its waiters tried. A waiter that finds the key taken tries once, subscribes
// to the key's release notices, tries again and sleeps (acquire.go, contention.run); once
// its second try is out, a release notice wakes it whenever it comes (watch.next).
type tryCounter struct {
	mu            sync.Mutex
	reads, writes map[string]int // by node address: readAcquireScript and acquireScript calls sent
}

// countTries makes the clients built with opt count their tries in the returned counter.
func countTries(opt *Options) *tryCounter {
	tc := &tryCounter{reads: map[string]int{}, writes: map[string]int{}}
	opt.ClientBuilder = func(o *redis.Options) (*redis.Client, error) {
		c := redis.NewClient(o)
		c.AddHook(tryHook{tc, o.Addr})
		return c, nil
	}
	return tc
}

// tries returns the read and write tries sent to every one of the n nodes (the least
// over the nodes: a try goes to all of them).
func (tc *tryCounter) tries(n int) (reads, writes int) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	least := func(m map[string]int) int {
		if len(m) < n {
			return 0
		}
		low := -1
		for _, v := range m {
			if low < 0 || v < low {
				low = v
			}
		}
		return low
	}
	return least(tc.reads), least(tc.writes)
}

func (tc *tryCounter) sent(addr string, cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	name, _ := args[0].(string)
	arg, _ := args[1].(string)
	is := func(s *transport.Script) bool {
		return (strings.EqualFold(name, "evalsha") && arg == s.Digest()) || (strings.EqualFold(name, "eval") && arg == s.Src())
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	switch {
	case is(readAcquireScript):
		tc.reads[addr]++
	case is(acquireScript):
		tc.writes[addr]++
	}
}

// tryHook is tryCounter's hook on the connections to one node.
type tryHook struct {
	tc   *tryCounter
	addr string
}

func (h tryHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h tryHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.tc.sent(h.addr, cmd)
		return next(ctx, cmd)
	}
}

func (h tryHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.tc.sent(h.addr, cmd)
		}
		return next(ctx, cmds)
	}
}
