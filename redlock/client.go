package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"log/slog"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// Client takes Redlocks on N independent Redis masters. It is safe for concurrent use;
// one Client per node set per process is the intended use (it owns the connections, the
// release-notice subscriptions, the local wait queues and the health checks).
type Client struct {
	id string // random; tags this client's release notices
	// firstMark is the mark of the data markers this client's first hello to each node
	// creates (node.hello; voting.go, freshStartOf); random, never used for anything else.
	firstMark string
	opt       Options
	marker    string // the data marker's name (dataloss.go): every acquire round sends it
	boundK    string // where the nodes keep the bound (boundKey): every acquire round sends it too
	// markerGet reads the data marker behind the plain SETs of a first try, once per
	// pipeline (sendRound, Command.Then): one command shared by every round.
	markerGet *transport.Command
	// seqK is the node's write sequence's name (rollback.go); seqMarker advances it and
	// reads the marker behind the plain SETs, in place of markerGet.
	seqK      string
	seqMarker *transport.Command
	// seqCheckOff: this client neither advances nor judges the write sequence (an
	// unexported switch for the benchmarks that measure its cost: bench_seq_test.go).
	seqCheckOff atomic.Bool
	nodes       []*node
	links       []*transport.Node // nodes[i].tr, for transport.OnAll
	quorum      int

	queues  *queues
	notices *notifier
	renewer *renewer

	heldMu sync.Mutex
	held   map[string][]*Lock // by key: one exclusive holder, or any number of readers
	// shutting: shutdown found no lock held and goes on; register refuses from then on
	// (guarded by heldMu).
	shutting bool

	pending pendingCalls // release calls on their way (nodes_call.go)

	ctx      context.Context // cancelled by Close: ends health checks and subscribers
	cancel   context.CancelFunc
	bg       sync.WaitGroup // every goroutine the client starts
	bgMu     sync.RWMutex   // orders goroutine starts against Close
	closed   atomic.Bool    // no new acquires
	shut     bool           // background stopped (guarded by bgMu)
	shutMu   sync.Mutex     // one shutdown at a time; shutDone once it ran
	shutDone bool
	warnings []string

	sameServerWarned atomic.Bool

	// clockSkew shifts this client's clock for token proposals: tests only (a client
	// whose clock is wrong).
	clockSkew time.Duration
	readers   readGroups // readers sharing an entry (readgroup.go)
}

// New connects to the given nodes (redis://, rediss://, unix:// or host:port; user,
// password and db in the URL, as CheckNodeURL describes). It does not wait for the nodes to
// answer: unreachable nodes show as down and a lock needs a quorum of them.
func New(urls []string, opt Options) (*Client, error) {
	if len(urls) == 0 {
		return nil, errors.New("redlock: at least one node URL is required")
	}
	opt, err := opt.Resolve()
	if err != nil {
		return nil, fmt.Errorf("redlock: %w", err)
	}
	c := &Client{id: rand.Text(), firstMark: rand.Text(), opt: opt, quorum: len(urls)/2 + 1, held: map[string][]*Lock{},
		marker: opt.Prefix + markerName, boundK: opt.Prefix + boundName}
	c.markerGet = transport.NewCommand(nil, nil, "get", c.marker)
	c.seqK = opt.Prefix + writeSeqName
	c.seqMarker = transport.NewCommand(nil, nil, "eval", seqMarkerLua, 2, c.seqK, c.marker)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	seen := map[string]bool{}
	for _, u := range urls {
		n, err := newNode(c, u)
		if err != nil {
			c.closeNodes()
			return nil, err
		}
		if seen[n.addr] {
			c.warnings = append(c.warnings, fmt.Sprintf("node %s is listed more than once: it counts as several votes, which defeats the quorum", n.addr))
		}
		seen[n.addr] = true
		if w := n.tr.TLSWarning(); w != "" {
			c.warnings = append(c.warnings, w)
		}
		c.nodes = append(c.nodes, n)
		c.links = append(c.links, n.tr)
	}
	if len(c.nodes)%2 == 0 {
		c.warnings = append(c.warnings, fmt.Sprintf("%d nodes: an even count tolerates no more failures than %d nodes; use an odd count", len(c.nodes), len(c.nodes)-1))
	}
	if !opt.DisablePipelining {
		for _, n := range c.nodes {
			c.goBackground(func() { n.tr.Flush(c.ctx) })
		}
	}
	c.queues = newQueues()
	c.notices = newNotifier(c)
	c.renewer = newRenewer(c)
	if opt.HealthInterval > 0 {
		for _, n := range c.nodes {
			c.goBackground(func() { c.healthLoop(n) })
		}
	}
	return c, nil
}

// Close refuses new acquires (ErrClosed) at once. Locks still held keep the client alive:
// they go on renewing and releasing, and the connections, subscriptions and health checks
// end when the last of them is released (a config reload may close a client while its
// streams are still running). With no lock held, Close shuts down before it returns,
// unless an Acquire already under way wins meanwhile: its lock keeps the client alive in
// the same way (Close then returns at once; the shutdown follows that lock's release).
func (c *Client) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.heldMu.Lock()
	idle := len(c.held) == 0
	c.heldMu.Unlock()
	if idle {
		return c.shutdown()
	}
	return nil
}

// shutdown stops everything the client started and closes the connections, once, when
// no lock is held (Close, or the release of the last lock after Close).
func (c *Client) shutdown() error {
	c.shutMu.Lock()
	defer c.shutMu.Unlock()
	if c.shutDone {
		return nil
	}
	// Releases that returned at a quorum still have calls on the way to the other
	// nodes, and acquire rounds may still give back their grants: let them land (a
	// round and its give-back end within three node timeouts) before the connections
	// close.
	c.pending.wait(3*c.opt.NodeTimeout + 100*time.Millisecond)
	// A round that was out when Close found no lock held may have won since: its lock
	// keeps the client alive like any other (its release shuts down). From here on a
	// round that wins is refused (register), so nothing holds a lock nobody renews.
	c.heldMu.Lock()
	if len(c.held) > 0 {
		c.heldMu.Unlock()
		return nil
	}
	c.shutting = true
	c.heldMu.Unlock()
	c.bgMu.Lock()
	c.shut = true
	c.bgMu.Unlock()
	c.cancel()
	c.notices.close()
	c.bg.Wait()
	c.shutDone = true
	return c.closeNodes()
}

func (c *Client) closeNodes() error {
	var errs []error
	for _, n := range c.nodes {
		if err := n.tr.Close(); err != nil {
			errs = append(errs, fmt.Errorf("redlock: closing %s: %w", n.addr, err))
		}
	}
	return errors.Join(errs...)
}

// goBackground runs f on a goroutine that shutdown waits for. After that it runs f inline,
// so no goroutine can start behind Close's back.
func (c *Client) goBackground(f func()) {
	c.bgMu.RLock()
	if c.shut {
		c.bgMu.RUnlock()
		f()
		return
	}
	c.bg.Add(1)
	c.bgMu.RUnlock()
	go func() {
		defer c.bg.Done()
		f()
	}()
}

// healthLoop probes one node until Close. The probe timeout is looser than node_timeout
// so a slow-but-alive node shows its latency instead of flapping.
func (c *Client) healthLoop(n *node) {
	timeout := max(c.opt.NodeTimeout, time.Second)
	t := time.NewTicker(c.opt.HealthInterval)
	defer t.Stop()
	for {
		n.tr.Check(c.ctx, timeout)      // INFO and announce: node.hello, node.heard
		n.tr.AfterCheck(c.ctx, timeout) // the permission probe, configuration problems logged
		n.reportHealth()
		c.warnSameServer()
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// warnSameServer logs once when two addresses turn out to be one server (same run_id).
func (c *Client) warnSameServer() {
	if len(c.nodes) < 2 {
		return
	}
	if c.sameServerWarned.Load() {
		return
	}
	byID := map[string]string{}
	for _, n := range c.nodes {
		s := n.status()
		if s.RunID == "" {
			continue
		}
		if other, dup := byID[s.RunID]; dup && other != s.Address {
			if c.sameServerWarned.CompareAndSwap(false, true) {
				c.opt.Logger.Warn("two node addresses are the same Redis server; its votes count twice, which defeats the quorum",
					slog.String("node", other), slog.String("same_as", s.Address))
			}
			return
		}
		byID[s.RunID] = s.Address
	}
}
