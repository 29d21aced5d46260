package main

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"
)

// ledger is the checking upstream's bookkeeping, without HTTP: who is inside the upstream
// per lock key, which fencing tokens it accepted, and every breach of the rules.
//
// The rules:
//
//   - Mutual exclusion: two requests for one key inside at once is a VIOLATION, unless the
//     one already inside came through a Caddy instance that was paused (SIGSTOP) since it
//     entered. Redlock cannot protect a holder that sleeps past its validity
//     (docs/safety.md); fencing does: that older request is marked superseded and every
//     later operation of it is rejected ("stale, rejected by fencing").
//   - Fencing: per key the upstream accepts only tokens above every token it accepted
//     before. A request arriving with a lower or equal token is a token REGRESSION,
//     unless it came through an instance paused shortly before (its lock lapsed while it
//     slept: stale, rejected). Rejected requests never count as inside.
//   - No unlocked proxying: with fencing on, every request must carry a token; and while
//     the runner says no quorum exists, nothing may enter, nor may a stream write, later
//     than a grace (ttl + slack) after the quorum was lost: such a lock cannot be valid.
//   - A superseded (stale) stream must be cancelled by Caddy once its instance runs again:
//     the upstream waits for that and records when it came.
//
// Lock modes (modes.go in this directory) change what an overlap is: readers of a key
// may be inside together (never with anyone else), up to limit holders of a limited key,
// and a request with several keys is a visit per key, judged per key. Fencing: a writer's
// token must be above every token accepted on the key, a reader's above every writer's
// (readers that hold a key together arrive in any order); a limited key's tokens
// increase per place, which the upstream cannot see, so they are only required. The
// upstream judges the lock each request's route asks for (modes.go, wantLock); a request
// whose lock, as Caddy reports it (mode, keys in lock order), is another is a WRONG LOCK.
type ledger struct {
	fencing bool
	pauses  *pauseLog
	now     func() time.Time

	limit int // holders a limited key admits

	mu        sync.Mutex
	inside    map[string][]*visit
	maxTok    map[string]int64
	maxWrite  map[string]int64 // per key, the largest token of an exclusive holder
	most      map[string]int   // per mode, the most live visits inside one key at once
	mostKey   map[string]int   // per key, the most live visits inside it at once
	noQuorum  time.Time        // when the quorum was lost; zero while there is one
	graceNoQ  time.Duration    // how long a lock may outlive the quorum: ttl + slack
	c         counters
	stale     []*visit          // superseded visits, for the fault-5 checks
	probes    map[string]*visit // visits of the runner's own probe requests, by id
	failures  []string          // the first breaches, for the report
	seq       int64
	staleSpan time.Duration // a rejected entry counts as stale if its instance was paused this recently

	// onBreach, if set, is called (under the ledger's lock: it must not block) with the
	// key of every violation or regression, for diagnostics.
	onBreach func(key string)
}

// counters are cumulative; the runner takes differences per fault.
type counters struct {
	Entries          int64 // requests admitted inside
	Violations       int64 // same-key overlaps between live (unpaused) requests
	Regressions      int64 // tokens at or below an accepted one, from unpaused instances
	StaleRejected    int64 // requests or stream writes of paused instances, rejected by fencing
	StaleOverlaps    int64 // overlaps with a request whose instance was paused (fenced off)
	Unlocked         int64 // entries or stream writes that cannot have held a valid lock
	Cancelled        int64 // streams cancelled mid-stream (the upstream saw the request end)
	StreamsDone      int64 // streams that ran to their end
	StaleNotCanceled int64 // superseded streams Caddy never cancelled
	Mismatched       int64 // requests whose lock (mode, keys) is not the one their route asks for
}

func (c counters) sub(o counters) counters {
	return counters{
		Entries: c.Entries - o.Entries, Violations: c.Violations - o.Violations,
		Regressions: c.Regressions - o.Regressions, StaleRejected: c.StaleRejected - o.StaleRejected,
		StaleOverlaps: c.StaleOverlaps - o.StaleOverlaps, Unlocked: c.Unlocked - o.Unlocked,
		Cancelled: c.Cancelled - o.Cancelled, StreamsDone: c.StreamsDone - o.StreamsDone,
		StaleNotCanceled: c.StaleNotCanceled - o.StaleNotCanceled, Mismatched: c.Mismatched - o.Mismatched,
	}
}

// bad is the number of breaches that fail the suite.
func (c counters) bad() int64 {
	return c.Violations + c.Regressions + c.Unlocked + c.StaleNotCanceled + c.Mismatched
}

// visit is one request inside the upstream.
type visit struct {
	n          int64
	id         string // X-Chaos-Req
	waitMs     string // how long Caddy waited for the lock
	key        string
	mode       string // modeExclusive, modeShared or modeLimit
	inst       int
	token      int64
	entered    time.Time
	superseded bool      // a later token entered: every further write is rejected
	rejectedAt time.Time // first write rejected by fencing
	unlocked   bool      // counted once as unlocked
	cancelAt   time.Time // when the upstream saw the request cancelled
	left       bool
}

const maxFailureLog = 30

func newLedger(fencing bool, pauses *pauseLog, staleSpan time.Duration) *ledger {
	return &ledger{fencing: fencing, pauses: pauses, now: time.Now, staleSpan: staleSpan,
		inside: map[string][]*visit{}, maxTok: map[string]int64{}, probes: map[string]*visit{},
		maxWrite: map[string]int64{}, most: map[string]int{}, mostKey: map[string]int{}, limit: chaosLimit}
}

func (l *ledger) failf(format string, args ...any) {
	if len(l.failures) < maxFailureLog {
		l.failures = append(l.failures, l.now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

func (l *ledger) breach(key string) {
	if l.onBreach != nil {
		l.onBreach(key)
	}
}

// setNoQuorum tells the ledger that the quorum was lost at t (zero: it is back).
func (l *ledger) setNoQuorum(t time.Time, grace time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noQuorum, l.graceNoQ = t, grace
}

// unlockedNowLocked reports whether no lock can be valid now (the quorum is gone for
// longer than the grace).
func (l *ledger) unlockedNowLocked(now time.Time) bool {
	return !l.noQuorum.IsZero() && now.Sub(l.noQuorum) > l.graceNoQ
}

// enter admits an exclusive request (enterMode).
func (l *ledger) enter(key string, inst int, token int64, hasToken bool, id, waitMs string) (v *visit, ok bool, why string) {
	return l.enterMode(key, modeExclusive, inst, token, hasToken, id, waitMs)
}

// enterMode admits a request holding key in mode, or refuses it (ok false) when fencing
// rejects its token. A missing token (fencing on) is an unlocked request; it is refused
// too.
func (l *ledger) enterMode(key, mode string, inst int, token int64, hasToken bool, id, waitMs string) (v *visit, ok bool, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.unlockedNowLocked(now) {
		l.c.Unlocked++
		l.failf("UNLOCKED: %s (instance %d, token %d) entered %v after the quorum was lost", id, inst, token, now.Sub(l.noQuorum).Round(time.Millisecond))
	}
	if l.fencing {
		if !hasToken || key == "" {
			l.c.Unlocked++
			l.failf("UNLOCKED: %s (instance %d) reached the upstream without a lock key or fencing token (key %q)", id, inst, key)
			return nil, false, "no lock"
		}
		if max := l.floorLocked(key, mode); token <= max {
			if l.pauses.pausedWithin(inst, now.Add(-l.staleSpan), now) {
				l.c.StaleRejected++
				return nil, false, "stale token"
			}
			l.c.Regressions++
			l.breach(key)
			l.failf("REGRESSION: key %s: %s (instance %d, %s) came with token %d, but %d was accepted before", key, id, inst, mode, token, max)
			return nil, false, "token regression"
		}
		l.maxTok[key] = max(l.maxTok[key], token)
		if mode == modeExclusive {
			l.maxWrite[key] = token
		}
	}
	l.seq++
	v = &visit{n: l.seq, id: id, key: key, mode: mode, inst: inst, token: token, entered: now, waitMs: waitMs}
	live := 1 // v, and the live visits it may share the key with
	all := 1  // v, and every live visit inside the key (overlaps included)
	for _, o := range l.inside[key] {
		paused := o.superseded || l.pauses.pausedSince(o.inst, o.entered, now)
		if !paused {
			all++
		}
		if compatible(o.mode, mode) {
			if !paused {
				live++
			}
			continue
		}
		if paused {
			if !o.superseded {
				o.superseded = true
				l.stale = append(l.stale, o)
			}
			l.c.StaleOverlaps++
			continue
		}
		l.c.Violations++
		l.breach(key)
		l.failf("VIOLATION: key %s: %s (instance %d, %s, token %d, waited %sms) entered while %s (instance %d, %s, token %d, waited %sms) had been inside for %v",
			key, id, inst, mode, token, waitMs, o.id, o.inst, o.mode, o.token, o.waitMs, now.Sub(o.entered).Round(time.Millisecond))
	}
	if mode == modeLimit && live > l.limit {
		l.c.Violations++
		l.breach(key)
		l.failf("VIOLATION: key %s: %s (instance %d, token %d) entered as holder %d of a key limited to %d", key, id, inst, token, live, l.limit)
	}
	l.most[mode] = max(l.most[mode], live)
	l.mostKey[key] = max(l.mostKey[key], all)
	l.inside[key] = append(l.inside[key], v)
	if strings.HasPrefix(id, probePrefix) {
		l.probes[id] = v
	}
	l.c.Entries++
	return v, true, ""
}

// floorLocked is the token a request holding key in mode must be above (fencing).
func (l *ledger) floorLocked(key, mode string) int64 {
	switch mode {
	case modeShared:
		return l.maxWrite[key]
	case modeLimit:
		return 0
	}
	return l.maxTok[key]
}

// compatible reports whether holders in modes a and b may be inside one key together.
func compatible(a, b string) bool {
	return a == b && (a == modeShared || a == modeLimit)
}

// mostInside returns, per mode, the most live requests that were inside one key at once
// (readers together, a limited key's holders): the lock was not stricter than needed.
func (l *ledger) mostInside() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.most)
}

// mostPerKey returns, per key, the most live requests that were inside it at once.
func (l *ledger) mostPerKey() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.mostKey)
}

// write is one fenced operation of a visit (a stream chunk, or a request's final
// commit): false means it is rejected and the request must stop writing.
func (l *ledger) write(v *visit) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.unlockedNowLocked(now) && !v.unlocked {
		v.unlocked = true
		l.c.Unlocked++
		l.failf("UNLOCKED: %s (instance %d) still writing %v after the quorum was lost", v.id, v.inst, now.Sub(l.noQuorum).Round(time.Millisecond))
	}
	if !v.superseded && !(l.fencing && l.floorLocked(v.key, v.mode) > v.token) {
		return true
	}
	if v.rejectedAt.IsZero() {
		v.rejectedAt = now
		l.c.StaleRejected++
	}
	return false
}

// leave takes a visit out; cancelled says the request ended before its response did.
func (l *ledger) leave(v *visit, cancelled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v.left {
		return
	}
	v.left = true
	if cancelled {
		v.cancelAt = l.now()
		l.c.Cancelled++
	}
	rest := l.inside[v.key][:0]
	for _, o := range l.inside[v.key] {
		if o != v {
			rest = append(rest, o)
		}
	}
	if len(rest) == 0 {
		delete(l.inside, v.key)
	} else {
		l.inside[v.key] = rest
	}
}

// mismatched counts a request whose lock, as Caddy reports it, is not the one its route
// asks for (modes.go, wantLock).
func (l *ledger) mismatched(id string, inst int, what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.c.Mismatched++
	l.failf("WRONG LOCK: %s (instance %d): %s", id, inst, what)
}

// streamDone counts a stream that ran to its end.
func (l *ledger) streamDone() {
	l.mu.Lock()
	l.c.StreamsDone++
	l.mu.Unlock()
}

// staleNotCancelled counts a superseded stream whose cancellation never came.
func (l *ledger) staleNotCancelled(v *visit, waited time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.c.StaleNotCanceled++
	l.failf("STALE NOT CANCELLED: %s (instance %d, key %s, token %d) was still open %v after fencing rejected it",
		v.id, v.inst, v.key, v.token, waited.Round(time.Millisecond))
}

func (l *ledger) snapshot() counters {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c
}

// staleSince returns copies of the superseded visits of instance inst entered at or after t.
func (l *ledger) staleSince(inst int, t time.Time) []visit {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []visit
	for _, v := range l.stale {
		if v.inst == inst && !v.entered.Before(t) {
			out = append(out, *v)
		}
	}
	return out
}

// probeVisit returns a copy of the visit of the runner's probe request id, if it entered.
func (l *ledger) probeVisit(id string) (visit, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.probes[id]
	if !ok {
		return visit{}, false
	}
	return *v, true
}

// insideCount is the number of requests inside now.
func (l *ledger) insideCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, vs := range l.inside {
		n += len(vs)
	}
	return n
}

func (l *ledger) failureLog() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.failures...)
}
