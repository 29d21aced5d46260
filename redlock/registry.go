package redlock

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

func (c *Client) register(l *Lock) {
	c.heldMu.Lock()
	c.held[l.key] = append(c.held[l.key], l)
	c.heldMu.Unlock()
}

// replaceHeld puts next in old's place (a local handoff: the same lock in Redis).
func (c *Client) replaceHeld(old, next *Lock) {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	ls := c.held[old.key]
	for i, o := range ls {
		if o == old {
			ls[i] = next
			return
		}
	}
	c.held[old.key] = append(ls, next)
}

func (c *Client) unregister(l *Lock) {
	c.heldMu.Lock()
	ls := c.held[l.key]
	for i, o := range ls {
		if o == l {
			ls = append(ls[:i:i], ls[i+1:]...)
			break
		}
	}
	if len(ls) == 0 {
		delete(c.held, l.key)
	} else {
		c.held[l.key] = ls
	}
	last := len(c.held) == 0
	c.heldMu.Unlock()
	if last && c.closed.Load() {
		_ = c.shutdown() // Close was called while this lock was held
	}
}

// HeldLock describes a lock held by this client. It never includes the lock's value.
type HeldLock struct {
	Key        string
	AcquiredAt time.Time
	Validity   time.Duration
	Renewals   int
	Token      int64
	Waiters    int // callers of this process queued behind it
}

// Held lists the locks this client holds, by key.
func (c *Client) Held() []HeldLock {
	waiting := c.queues.waiting()
	c.heldMu.Lock()
	out := make([]HeldLock, 0, len(c.held))
	for _, ls := range c.held {
		for _, l := range ls {
			out = append(out, HeldLock{Key: l.key, AcquiredAt: l.acquiredAt, Validity: l.Validity(),
				Renewals: l.Renewals(), Token: l.token, Waiters: waiting[l.key]})
		}
	}
	c.heldMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Waiting returns, per key, how many callers of this process wait in the local queue
// (not counting the one contending in Redis or holding the lock).
func (c *Client) Waiting() map[string]int { return c.queues.waiting() }

// Holding returns the lock this client holds on key, if any: the one taken last (a
// previous holder may still be on its way out; readers share the key).
func (c *Client) Holding(key string) *Lock {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if ls := c.held[key]; len(ls) > 0 {
		return ls[len(ls)-1]
	}
	return nil
}

// holders returns every lock this client holds on key.
func (c *Client) holders(key string) []*Lock {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	return append([]*Lock(nil), c.held[key]...)
}

// KeyNode is one node's view of a key.
type KeyNode struct {
	Node    string        `json:"node"`
	Present bool          `json:"present"`
	PTTL    time.Duration `json:"-"`
	Ours    bool          `json:"held_here"`         // holds this client's current value (readers: the key is read-held and this client reads)
	Type    string        `json:"type,omitempty"`    // "not a string" when another client's lock of another kind holds the name
	Readers int           `json:"readers,omitempty"` // shared: entries in the readers' set (some may have expired, not yet dropped)
	Error   string        `json:"error,omitempty"`
}

// KeyState is a key seen across all nodes.
type KeyState struct {
	Key        string    `json:"key"`
	Nodes      []KeyNode `json:"nodes"`
	Present    int       `json:"present_on"`
	QuorumHeld bool      `json:"quorum_held"` // a quorum of nodes hold the same value
	HeldHere   bool      `json:"held_here"`
}

// Inspect reads key on every node (GET and PTTL). Values are compared, never returned.
func (c *Client) Inspect(ctx context.Context, key string) (KeyState, error) {
	if err := validateKey(key); err != nil {
		return KeyState{}, err
	}
	nm := c.names(key)
	var ours string
	if l := c.Holding(key); l != nil {
		ours = l.value
		if l.nm.shared {
			ours = sharedMarker // readers hold the name with the marker
		}
	}
	st := KeyState{Key: key, Nodes: make([]KeyNode, len(c.nodes))}
	values := make([]string, len(c.nodes))
	done := make(chan struct{}, len(c.nodes))
	for i, nd := range c.nodes {
		go func() {
			defer func() { done <- struct{}{} }()
			cctx, cancel := context.WithTimeout(ctx, c.opt.NodeTimeout)
			defer cancel()
			t0 := time.Now()
			pipe := nd.client.Pipeline()
			get := pipe.Get(cctx, nm.lock)
			pttl := pipe.PTTL(cctx, nm.lock)
			readers := pipe.ZCard(cctx, nm.readers)
			_, _ = pipe.Exec(cctx)
			// GET on a key of another type fails with WRONGTYPE: another client's lock of
			// another kind (e.g. a Redisson hash), held, not by us. (Not asked with TYPE:
			// one command fewer for the ACL user to be granted.)
			gerr := get.Err()
			foreign := gerr != nil && strings.HasPrefix(gerr.Error(), "WRONGTYPE")
			err := pttl.Err()
			if gerr != nil && gerr != redis.Nil && !foreign {
				err = errors.Join(err, gerr)
			}
			nd.record("inspect", time.Since(t0), err)
			kn := KeyNode{Node: nd.addr}
			switch {
			case err != nil:
				kn.Error = err.Error()
			case foreign:
				kn.Present, kn.PTTL, kn.Type = true, pttl.Val(), "not a string"
				values[i] = "\x00foreign" // alike to each other, never to ours
			case gerr == nil:
				kn.Present = true
				kn.PTTL = pttl.Val()
				kn.Ours = ours != "" && get.Val() == ours
				values[i] = get.Val()
				if get.Val() == sharedMarker {
					kn.Readers = int(readers.Val())
				}
			}
			st.Nodes[i] = kn
		}()
	}
	for range c.nodes {
		<-done
	}
	count := map[string]int{}
	for i, kn := range st.Nodes {
		if kn.Present {
			st.Present++
			count[values[i]]++
		}
	}
	for v, n := range count {
		if n >= c.quorum {
			st.QuorumHeld = true
			st.HeldHere = ours != "" && v == ours
		}
	}
	return st, nil
}

// ForceRelease deletes key on every node whoever holds it (an operator override) and
// marks a lock this client holds on it as lost, so its holder stops. It returns how many
// nodes had the key.
func (c *Client) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := validateKey(key); err != nil {
		return 0, err
	}
	// No local handoff of this key while it is being forced: a lock handed on now would
	// hold keys about to be deleted. The holder (a handoff done before is registered by
	// then) is marked lost first. A waiter that then takes the key anew in Redis is not
	// touched: its SETs came after our deletes or are deleted by them (the narrow race
	// any operator override has; fencing guards it).
	c.queues.beginForce(key)
	defer c.queues.endForce(key)
	held := c.holders(key)
	for _, l := range held {
		l.markLost(LostForceReleased)
	}
	nm := c.names(key)
	forceKeys := []string{nm.lock, nm.writer, nm.readers}
	for _, s := range c.slotNames(key, MaxLimit) {
		forceKeys = append(forceKeys, s.lock)
	}
	ctx = context.WithoutCancel(ctx)
	deleted, _, errs := c.onAll(ctx, "force_release", nil, func(cctx context.Context, nd *node) (bool, error) {
		n, err := forceReleaseScript.Run(cctx, nd.client, forceKeys, nm.channel).Int64()
		return n > 0, err
	}, 0)
	// Release the holders marked lost: their renewals stop at once, and compare-and-delete
	// removes what a renewal in flight may have written back (else a holder draining its
	// lock would keep renewing the key). Their own Release then finds them released.
	for _, l := range held {
		if err := l.Release(ctx); err != nil && !errors.Is(err, ErrReleased) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return deleted, fmt.Errorf("redlock: force release %q: %d node(s) failed: %w", key, len(errs), errors.Join(errs...))
	}
	return deleted, nil
}
