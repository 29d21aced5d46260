package redlock

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// This file holds what an operator (an admin API, a CLI) asks of a client: how it and
// its nodes are doing, what Redis says about one key, and the override that frees a key.

// Status is a client's state at one moment (Client.Status).
type Status struct {
	Quorum int          // nodes a lock needs: N/2+1
	Nodes  []NodeStatus // every node's health, in the order of New's URLs
	// Held lists the locks this client holds, by key (Lock.Info describes each).
	Held []*Lock
	// Waiting counts, per key, the callers of this client queued behind the one that
	// holds it or contends for it in Redis.
	Waiting map[string]int
	// Warnings are configuration problems found by New (even node count, duplicate
	// addresses). Nodes found later to be one server under several addresses are logged.
	Warnings []string
}

// Status reports the client's state.
func (c *Client) Status() Status {
	st := Status{Quorum: c.quorum, Nodes: make([]NodeStatus, len(c.nodes)), Waiting: c.queues.waiting(),
		Warnings: append([]string(nil), c.warnings...)}
	for i, n := range c.nodes {
		st.Nodes[i] = n.status()
	}
	c.heldMu.Lock()
	for _, ls := range c.held {
		st.Held = append(st.Held, ls...)
	}
	c.heldMu.Unlock()
	sort.SliceStable(st.Held, func(i, j int) bool { return st.Held[i].key < st.Held[j].key })
	return st
}

// KeyNode is one node's view of a key.
type KeyNode struct {
	Node    string        // address, never with a password
	Present bool          // the node has the key
	PTTL    time.Duration // its remaining ttl; negative: no expiry (not a Redlock client's key)
	Ours    bool          // holds this client's current value (readers: read-held, and this client reads)
	Type    string        // "not a string" when another client's lock of another kind holds the name
	Readers int           // shared: entries in the readers' set (some may have expired, not yet dropped)
	Error   string        // the node's failure, if it did not answer
}

// KeyState is a key seen across all nodes.
type KeyState struct {
	Key        string
	Nodes      []KeyNode // in the order of New's URLs
	Present    int       // nodes that have the key
	QuorumHeld bool      // a quorum of nodes hold the same value
	HeldHere   bool      // that value is this client's
	// Places are the places of a limited key (AcquireOptions.Limit) present on any node,
	// by index: a limited key's holders hold places, not the key's own name.
	Places []PlaceState
}

// PlaceState is one place of a limited key across all nodes.
type PlaceState struct {
	Index      int
	Present    int  // nodes that have it
	QuorumHeld bool // a quorum of nodes hold the same value: someone holds this place
	HeldHere   bool // that value is one of this client's locks
}

// Inspect reads key on every node (GET and PTTL). Values are compared, never returned.
func (c *Client) Inspect(ctx context.Context, key string) (KeyState, error) {
	if err := validateKey(key); err != nil {
		return KeyState{}, err
	}
	nm := c.names(key)
	var ours string
	mine := map[string]bool{} // the values of every lock this client holds on key (places too)
	for _, l := range c.holders(key) {
		mine[l.value] = true
	}
	if l := c.holding(key); l != nil {
		ours = l.value
		if l.nm.shared {
			ours = sharedMarker // readers hold the name with the marker
		}
	}
	places := c.slotNames(key, MaxLimit)
	st := KeyState{Key: key, Nodes: make([]KeyNode, len(c.nodes))}
	values := make([]string, len(c.nodes))
	placeValues := make([][]string, len(c.nodes))
	c.onAll(ctx, "inspect", 0, func(cctx context.Context, i int, nd *node) (bool, error) {
		kn, value, pv, err := inspectNode(cctx, nd, nm, places, ours)
		st.Nodes[i], values[i], placeValues[i] = kn, value, pv
		return true, err
	})
	st.Present, st.QuorumHeld, st.HeldHere = c.tallyValues(values, func(v string) bool { return ours != "" && v == ours })
	for p := range places {
		column := make([]string, len(c.nodes))
		for i := range c.nodes {
			if placeValues[i] != nil {
				column[i] = placeValues[i][p]
			}
		}
		ps := PlaceState{Index: p}
		ps.Present, ps.QuorumHeld, ps.HeldHere = c.tallyValues(column, func(v string) bool { return mine[v] })
		if ps.Present > 0 {
			st.Places = append(st.Places, ps)
		}
	}
	return st, nil
}

// tallyValues counts the nodes with a value ("" is absent) and says whether a quorum
// holds one value, and whether ours says that value is ours.
func (c *Client) tallyValues(values []string, ours func(string) bool) (present int, quorum, here bool) {
	count := map[string]int{}
	for _, v := range values {
		if v != "" {
			present++
			count[v]++
		}
	}
	for v, n := range count {
		if n >= c.quorum {
			quorum, here = true, ours(v)
		}
	}
	return present, quorum, here
}

// inspectNode reads key's names on one node, and the places of a limited key: what it
// holds, and the values to compare across nodes (empty when absent; alike for every
// foreign holder, never equal to ours).
func inspectNode(cctx context.Context, nd *node, nm names, places []names, ours string) (KeyNode, string, []string, error) {
	cmds := make([][]any, 0, 3+len(places))
	cmds = append(cmds, []any{"get", nm.lock}, []any{"pttl", nm.lock}, []any{"zcard", nm.readers})
	for _, p := range places {
		cmds = append(cmds, []any{"get", p.lock})
	}
	replies, _ := nd.tr.Pipeline(cctx, cmds...)
	get, readers := replies[0], replies[2]
	pttl, pttlErr := pttlOf(replies[1])
	pv := make([]string, len(places))
	for i, g := range replies[3:] {
		if v, err := g.Text(); err == nil {
			pv[i] = v
		}
	}
	// GET on a key of another type fails with WRONGTYPE: another client's lock of another
	// kind (e.g. a Redisson hash), held, not by us. (Not asked with TYPE: one command
	// fewer for the ACL user to be granted.)
	value, gerr := get.Text()
	foreign := gerr != nil && strings.HasPrefix(gerr.Error(), "WRONGTYPE")
	err := pttlErr
	if gerr != nil && !get.IsNil() && !foreign {
		err = errors.Join(err, gerr)
	}
	kn := KeyNode{Node: nd.addr}
	switch {
	case err != nil:
		kn.Error = err.Error()
		return kn, "", nil, err
	case foreign:
		kn.Present, kn.PTTL, kn.Type = true, pttl, "not a string"
		return kn, "\x00foreign", pv, nil
	case gerr == nil:
		kn.Present, kn.PTTL = true, pttl
		kn.Ours = ours != "" && value == ours
		if value == sharedMarker {
			n, _ := readers.Int64()
			kn.Readers = int(n)
		}
		return kn, value, pv, nil
	}
	return kn, "", pv, nil
}

// pttlOf reads a PTTL reply as go-redis's PTTL does: milliseconds, with -1 (no expiry)
// and -2 (no key) kept as they are.
func pttlOf(r transport.Reply) (time.Duration, error) {
	ms, err := r.Int64()
	if err != nil || ms < 0 {
		return time.Duration(ms), err
	}
	return time.Duration(ms) * time.Millisecond, nil
}
