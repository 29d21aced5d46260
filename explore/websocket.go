package main

// The websocket shape (issue 39), drawn in place of half the stream (SSE) shape's cases,
// on a stream of its own (EXPLORE_AVOID=issue39 leaves it out): reverse_proxy inside the
// redlock block tunnels HTTP/1.1 upgrades to the upstream's websocket endpoint
// (wsupstream.go), whose work on the key lasts as long as it keeps the tunnel open. Its
// endings: the client closes (a close handshake), the client leaves (a FIN or a reset,
// no close frame), the upstream closes, a lock loss (force release; a majority paused,
// as drawn), max_hold, and `stream_timeout` on the proxy, which cuts only upgraded
// connections; a reload or a stop as drawn (Caddy closes the tunnels it holds).
//
// What docs/configuration.md promises a tunnel (the judge's rules): the lock is held
// while the tunnel is open and a lost lock closes it; a clean close on both sides
// releases at once, any other end (a reset, stream_timeout, Caddy shutting it) drains
// one ttl, as the upstream may still work on the last message. The usual rules judge
// that (exclusion, work and bytes after a loss); judgeWebsocket adds what they leave
// out: a tunnel must close at a max_hold too, and stream_timeout must cut it.

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

const shapeWebsocket = "websocket"

// endStreamTimeout: `stream_timeout` on the proxy, shorter than the first tunnel.
const endStreamTimeout = "streamtimeout"

const streamTimeout = 250 * time.Millisecond

// wsEndings are the endings drawn for a websocket case in place of a local one (a
// global ending stays: batches keep their one global fault).
var wsEndings = []string{endClean, endAbort, endClose, endForce, endMaxHold, endStreamTimeout}

// drawWebsocket replaces the stream shape, half the time, by the websocket shape.
func (c *caseSpec) drawWebsocket() {
	if avoidIssue39 || c.shape != shapeStream {
		return
	}
	r := rand.New(rand.NewPCG(c.seed^0x776562736f636b74, c.seed))
	if r.IntN(2) != 0 {
		return
	}
	c.shape = shapeWebsocket
	if !globalEnding(c.ending) {
		c.ending = pick(r, wsEndings)
		c.faultAt = time.Duration(150+r.IntN(250)) * time.Millisecond
	}
	c.lock.maxHold = c.ending == endMaxHold
	c.target = ""
	if c.ending == endForce {
		c.target = c.keyOf(c.blocks[0].keys, c.reqs[0].keyID)[0]
	}
	noDeaf := externalLoss(c.ending) || c.lock.dryRun // fencing's job, not the lock's (fixRequests)
	for i := range c.reqs {
		q := &c.reqs[i]
		if i > 0 && r.IntN(4) == 0 {
			// An ordinary request through the same proxy: stream_timeout must leave it be.
			if noDeaf {
				q.work = strings.ReplaceAll(q.work, ",deaf", "")
			}
			continue
		}
		q.client, q.method, q.sized, q.first = clientWS, "GET", false, ""
		q.wsMsgs, q.wsGap = 3+r.IntN(4), time.Duration(40+r.IntN(60))*time.Millisecond
		q.work = fmt.Sprintf("ws,d=%dms", 100+r.IntN(200))
		if r.IntN(3) == 0 && !noDeaf {
			q.work += ",deaf"
		}
		if i > 0 && r.IntN(4) == 0 {
			q.wsLeave, q.wsReset = 1+r.IntN(q.wsMsgs-1), r.IntN(2) == 0
		}
	}
	// The first request carries the ending: its tunnel is open when the ending strikes.
	q := &c.reqs[0]
	q.wsGap = 80 * time.Millisecond
	switch c.ending {
	case endAbort:
		q.wsMsgs, q.wsLeave, q.wsReset = 8, 2+r.IntN(3), r.IntN(2) == 0
	case endClose:
		q.wsMsgs = 8
		q.work += ",close"
	case endForce:
		q.wsMsgs = 12
	case endOutage:
		q.wsMsgs = 22 // past the pause's ttl
	case endMaxHold, endStreamTimeout, endReload, endStop:
		q.wsMsgs = 10
	}
	if (c.ending == endAbort || c.ending == endMaxHold || c.ending == endStreamTimeout) && !noDeaf && !strings.Contains(q.work, "deaf") && r.IntN(2) == 0 {
		q.work += ",deaf"
	}
}

// wsProxy is the websocket shape's proxy.
func (c *caseSpec) wsProxy(up string) string {
	if c.ending == endStreamTimeout {
		return proxy(up, "work", fmt.Sprintf("stream_timeout %s", streamTimeout))
	}
	return proxy(up, "work")
}

// judgeWebsocket: an attentive upstream's tunnel closes (it sees its end) within
// slackCancel of stream_timeout and of a max_hold, each a timer given slackTimer (the
// usual after-loss rule leaves max_hold's work out: its key drains); deaf work is judged
// by exclusion alone.
func (c *caseSpec) judgeWebsocket(v *verdict, works []work, f faults, end func(work) time.Time) {
	if c.shape != shapeWebsocket {
		return
	}
	for _, w := range works {
		q, ok := c.request(w.req)
		if !ok || !w.spec.ws || w.spec.deaf {
			continue
		}
		// stream_timeout is a timer: given slackTimer, as max_hold is.
		if c.ending == endStreamTimeout && end(w).After(w.start.Add(streamTimeout+slackTimer+slackCancel)) {
			v.add("stream_timeout: %s's tunnel stayed open on the upstream %s, stream_timeout %s",
				describe(w), ms(end(w).Sub(w.start)), streamTimeout)
		}
		if c.lock.dryRun || !c.underMaxHold(w.role) {
			continue
		}
		if at, _ := c.lossAt(q, w.role, works, f); !at.IsZero() && w.start.Before(at) && end(w).After(at.Add(slackCancel)) {
			v.add("after loss: %s's tunnel stayed open on the upstream %s after max_hold cut its lock", describe(w), ms(end(w).Sub(at)))
		}
	}
}
