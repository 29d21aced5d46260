package redlock

import (
	"context"
	"strconv"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/chance"
)

// Limited keys
//
// A limited key (AcquireOptions.Limit = n > 1) lets up to n holders have it at once: n
// places, each an ordinary exclusive Redlock under its own name (names.go, slotSuffix).
// Claim: at most n holders at once. Each holder holds one place by a quorum of grants,
// and two holders of one place cannot both be valid (the mutex's argument, place by
// place); with n places, at most n. A counter of holders voted by majority would not do:
// with n = 2 on 3 nodes, three clients can each win 2 of the 3 nodes' counters.
// Restarts, quarantine, renewal and force release are the mutex's (a force release
// deletes every place). A limit request always holds one of the key's n places: it gets
// its lock from a round on a place, never from a handoff (mode.go: a handoff never
// crosses modes).
//
// A waiter tries the places one after the other, from a random one (holders spread over
// the places, and a waiter finds a free one in about n/(free+1) tries); all busy, it waits
// for a release notice: every place of a key publishes on the key's one channel, so a
// waiter is woken when any place frees. The waiters of one client queue in the key's
// local line as for the mutex (FIFO); a holder leaves the line at once, so the next
// waiter goes on trying the other places. Places are not handed over locally.
//
// Fencing: the places of a key draw their tokens from the key's one counter, so every
// token of a key is distinct, and each place's tokens strictly increase (the fencing
// argument, fencing.go, holds for each place: its holders exclude each other).

// MaxLimit caps AcquireOptions.Limit: a waiter may try every place in turn.
const MaxLimit = 64

// slotSuffix names a place of a limited key: prefix+key+slotSuffix+i.
const slotSuffix = "\x00slot"

// slotNames are the n places of key.
func (c *Client) slotNames(key string, n int) []names {
	base := c.names(key)
	out := make([]names, n)
	for i := range out {
		out[i] = base
		out[i].lock = base.lock + slotSuffix + strconv.Itoa(i)
		out[i].turn = "" // readers meet the key's own name, never a place: no readers' turn
	}
	return out
}

// trySlots runs one round on each place in turn, from a random one, until one is granted.
// It returns that place, or, when none is granted, what the rounds say together: busy if
// any place answered busy (the smallest remaining ttl among them), unavailable if every
// round was.
func (c *Client) trySlots(ctx context.Context, slots []names, a try) (names, attemptResult) {
	if len(slots) == 1 {
		return slots[0], c.tryOnce(ctx, slots[0], a)
	}
	first := chance.N(len(slots))
	var out attemptResult
	unavailable := 0
	for i := range slots {
		nm := slots[(first+i)%len(slots)]
		res := c.tryOnce(ctx, nm, a)
		switch {
		case res.validity > 0, res.closed:
			return nm, res
		case res.unavailable != nil:
			unavailable++
			out.unavailable = res.unavailable
		case res.minPTTL > 0 && (out.minPTTL == 0 || res.minPTTL < out.minPTTL):
			out.minPTTL = res.minPTTL
		}
		if ctx.Err() != nil {
			break
		}
	}
	if unavailable < len(slots) {
		out.unavailable = nil
	}
	return names{}, out
}
