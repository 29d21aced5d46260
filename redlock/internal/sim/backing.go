package sim

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The state judge: every trusted holder must be backed by the nodes themselves, read from
// the simulated nodes by their own clocks, at every instant the backing can shrink.
//
// The conflict checks (check.go) see a bug only when a second holder happens to enter in
// the moments the bug opens. This judge sees the broken state itself: a holder trusted
// (its Context not done, its validity not over) whose backing on the nodes is below a
// quorum, by a microsecond, is a violation ("unbacked") at that instant, whether or not
// anyone else asks for the key then. Backed means, per node:
//
//   - exclusive, and each place of a limited key: the lock's name (the place's) holds the
//     holder's value, unexpired by the node's clock;
//   - shared: the holder's value is an unexpired entry of the readers' set;
//   - fenced (a token above 0), counted apart: the least token the node could give next
//     is above the holder's: its counter, unexpired, is at or above the token, or its
//     clock is past the token by more than the lead (a counter lapsed for disuse starts
//     again at the clock minus the lead: fencing.go);
//
// or the node lost its data (a restart, FLUSHALL, an eviction, a failover, a restart from
// a snapshot) less than a quarantine ago: the lock promises not to count such a node's
// vote for a quarantine from when a client saw the loss (redlock's doc.go), which is no
// earlier than the loss, so for the judge it still stands for the holder (it keeps
// everyone else from a quorum). Within the loss budget at most N - quorum nodes are so.
//
// When: after every command a node ran (a delete, an overwrite, a script), after every
// fault, at every holder's entry, and at the instant the backing of a trusted holder
// would fall below a quorum by expiry alone (each node's entry dies when the node's own
// clock passes its expiry: Redis's now > exp, in ms), which the judge computes from the
// nodes' clocks and schedules as a world event. So a trust that outlasts its backing is
// found in the first schedule that holds a lock to the end of its validity.
//
// Holders the conflict checks exempt (freed by another client's force release: force.go,
// the operator override's race) are exempt here too.

// backing is where a lock lives on the nodes: its names and secret value, read from the
// lock by reflection (the lock's API never shows them; the simulation alone reads them,
// as a debugger would). A rename in the lock fails every schedule at once (lockBacking).
type backing struct {
	lock, counter, readers, value string
}

func lockBacking(l *redlock.Lock) backing {
	v := reflect.ValueOf(l).Elem()
	nm := v.FieldByName("nm")
	field := func(s reflect.Value, name string) string {
		f := s.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.String {
			panic(fmt.Sprintf("sim: redlock.Lock has no string field %q: the state judge (backing.go) reads it", name))
		}
		return f.String()
	}
	if !nm.IsValid() {
		panic("sim: redlock.Lock has no field nm: the state judge (backing.go) reads it")
	}
	return backing{lock: field(nm, "lock"), counter: field(nm, "counter"), readers: field(nm, "readers"), value: field(v, "value")}
}

// noExpiry is a death instant far beyond any schedule.
var noExpiry = time.Unix(1<<40, 0)

// instantOf is the simulated instant at which the node's clock first reads us or more.
func (n *Node) instantOf(us int64) time.Time {
	target := us - n.w.wall0 - n.offset.Microseconds()
	el := int64(math.Ceil(float64(target) / n.rate))
	at := func(el int64) int64 { return int64(float64(el) * n.rate) }
	for at(el) < target {
		el++
	}
	for el > 0 && at(el-1) >= target {
		el--
	}
	return n.w.t0.Add(time.Duration(el) * time.Microsecond)
}

// stringDies is when a string value dies on the node (Redis: now_ms > exp).
func (n *Node) stringDies(v *value) time.Time {
	if v.exp == 0 {
		return noExpiry
	}
	return n.instantOf((v.exp + 1) * 1000)
}

// live returns the key's value if it is unexpired by the node's clock (without touching
// it: the judge only reads).
func (n *Node) live(key string, nowUS int64) *value {
	v := n.srv.data[key]
	if v == nil || v.exp != 0 && nowUS/1000 > v.exp {
		return nil
	}
	return v
}

// backedOn says whether node n backs h now, and until when by expiry alone; fenced, the
// same for its token.
func (n *Node) backedOn(h *holder, nowUS int64) (ok bool, until time.Time, fenced bool, fencedUntil time.Time) {
	b := h.b
	switch h.kind {
	case kindShared:
		if set := n.live(b.readers, nowUS); set != nil && set.z != nil {
			if sc, in := set.z[b.value]; in && float64(nowUS/1000) < sc {
				// The entry dies when now_ms >= score (the scripts' ZREMRANGEBYSCORE -inf ms).
				ok, until = true, n.instantOf(int64(math.Ceil(sc))*1000)
				if d := n.stringDies(set); d.Before(until) {
					until = d
				}
			}
		}
	default:
		if v := n.live(b.lock, nowUS); v != nil && v.z == nil && v.s == b.value {
			ok, until = true, n.stringDies(v)
		}
	}
	if h.fencing && h.token > 0 {
		// The least token the node could give next is max(counter + 1, now_µs - lead)
		// (fencing.go: a proposal within lead of its clock, else the counter's next or
		// the clock): above h's while the counter is at or above it, or once its clock
		// is past the token by the lead (a counter lapsed for disuse restarts there).
		byClock := n.instantOf(h.token + n.w.lead.Microseconds() + 1)
		if v := n.live(b.counter, nowUS); v != nil && v.z == nil {
			if c, err := strconv.ParseInt(v.s, 10, 64); err == nil && c >= h.token {
				fenced, fencedUntil = true, n.stringDies(v)
				if !fencedUntil.Before(byClock) {
					fencedUntil = noExpiry
				}
			}
		}
		if !fenced && nowUS-n.w.lead.Microseconds() > h.token {
			fenced, fencedUntil = true, noExpiry
		}
	}
	return ok, until, fenced, fencedUntil
}

// quorumEnd is the instant at which fewer than quorum of ends are still ahead.
func quorumEnd(ends []time.Time, quorum int) time.Time {
	slices.SortFunc(ends, func(a, b time.Time) int { return b.Compare(a) })
	return ends[quorum-1]
}

// judge checks every trusted holder's backing now, and schedules the next check at the
// earliest instant one of them would fall below a quorum by expiry alone (world loop).
func (w *World) judge() {
	g := w.g
	if g == nil {
		return
	}
	now := time.Now()
	quorum := len(w.nodes)/2 + 1
	var next time.Time
	g.mu.Lock()
	for _, kl := range g.keys {
		for h := range kl.inside {
			if h.b.value == "" {
				continue
			}
			i := h.l.Info()
			if i.Err != nil || i.Validity <= 0 || g.forced(kl, h, g.forceSlack) {
				continue
			}
			end, ok := w.backed(h, now, quorum)
			if !ok {
				if g.once(h, h) {
					g.violationLocked("unbacked", "%s on %q is trusted (validity %v left) but backed on fewer than %d nodes: %s",
						h.who, h.key, i.Validity, quorum, w.describe(h, now))
				}
				continue
			}
			if end.Before(now.Add(i.Validity)) && (next.IsZero() || end.Before(next)) {
				next = end
			}
		}
	}
	g.mu.Unlock()
	if !next.IsZero() && (w.judgeAt.IsZero() || next.Before(w.judgeAt) || !w.judgeAt.After(now)) {
		w.judgeAt = next
		w.at(next, w.judge)
	}
}

// backed reports whether h is backed on a quorum now (its value, and its token if
// fenced), and until when by expiry alone.
func (w *World) backed(h *holder, now time.Time, quorum int) (time.Time, bool) {
	var ends, fends [8]time.Time
	e, fe := ends[:0], fends[:0]
	for _, n := range w.nodes {
		if n.down || !n.lostAt.IsZero() && now.Before(n.lostAt.Add(w.quarantine)) {
			held := n.lostAt.Add(w.quarantine)
			e, fe = append(e, held), append(fe, held)
			continue
		}
		ok, until, fenced, fUntil := n.backedOn(h, n.clockUS())
		if ok {
			e = append(e, until)
		}
		if fenced {
			fe = append(fe, fUntil)
		}
	}
	if len(e) < quorum || h.fencing && h.token > 0 && len(fe) < quorum {
		return time.Time{}, false
	}
	end := quorumEnd(e, quorum)
	if h.fencing && h.token > 0 {
		if fend := quorumEnd(fe, quorum); fend.Before(end) {
			end = fend
		}
	}
	return end, true
}

// describe says what each node holds for h (a violation's text; never the value itself).
func (w *World) describe(h *holder, now time.Time) string {
	var parts []string
	for _, n := range w.nodes {
		nowUS := n.clockUS()
		ok, until, fenced, _ := n.backedOn(h, nowUS)
		s := fmt.Sprintf("n%d:", n.idx)
		switch {
		case n.down:
			s += "down"
		case !n.lostAt.IsZero() && now.Before(n.lostAt.Add(w.quarantine)):
			s += "lost " + now.Sub(n.lostAt).String() + " ago"
		case ok:
			s += "backs until +" + until.Sub(now).String()
		default:
			s += "no"
			if v := n.srv.data[h.b.lock]; v != nil && h.kind != kindShared {
				switch {
				case v.s != h.b.value:
					s += "(other value)"
				default:
					s += fmt.Sprintf("(expired %dms ago by its clock)", nowUS/1000-v.exp)
				}
			}
		}
		if h.fencing && h.token > 0 && !fenced {
			s += ",counter below token"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// lost notes that node n may have lost data now (world loop): it stands for every holder
// for a quarantine (the judge above).
func (w *World) lost(n *Node) {
	n.lostAt = time.Now()
}
