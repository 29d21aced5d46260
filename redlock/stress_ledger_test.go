package redlock

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// The judge of TestStressMixedModes: a ledger per key of the holders inside, checked at
// every entry, at every exit and by a sweep every few milliseconds.
//
// A holder is inside from when Acquire returned (its entry) until it calls Release or
// HandOver (its exit), and only while its lock is valid: Lock.validity() is 0 the moment
// the lock is lost, released or past its validity end, noticed or not. Every holder's
// validity is read on the one monotonic clock of this process, so two holders "both
// valid" means both trusted their locks at the same instant. Reading two locks at two
// instants c1 < c2 under the ledger's mutex is enough: an entry was made before c1 and a
// lock's validity is one interval that starts before its entry and never comes back
// once ended (a renewal that lands after the end marks the lock lost), so valid at c2
// means valid at c1 too.

// stressKind is what a holder asked for.
type stressKind int

const (
	kindExclusive stressKind = iota
	kindShared
	kindLimit
)

func (k stressKind) String() string {
	return [...]string{"exclusive", "shared", "limit"}[k]
}

// stressHolder is one lock in the ledger.
type stressHolder struct {
	l       *Lock
	who     string // worker
	kind    stressKind
	limit   int    // kindLimit: n
	place   string // kindLimit: the place's name in Redis
	set     bool   // one of an AcquireAll's locks
	fencing bool
	token   int64
	handed  bool
	entered time.Time
}

func (h *stressHolder) String() string {
	i := h.l.Info()
	s := fmt.Sprintf("%s %s", h.who, h.kind)
	if h.set {
		s += " (set)"
	}
	if h.kind == kindLimit {
		s += fmt.Sprintf(" place %q", h.place[strings.IndexByte(h.place, 0)+1:])
	}
	return s + fmt.Sprintf(" token %d handed %v attempts %d renewals %d validity %v err %v entered %s",
		h.token, h.handed, i.Attempts, i.Renewals, i.Validity, i.Err, h.entered.Format("15:04:05.000000"))
}

// conflicts says whether two holders of one key may not be inside together. Limited keys
// live under other names than the key itself (limit.go: places), so a limit holder meets
// only other limit holders, and only on the same place; the count is checked apart.
func conflicts(a, b *stressHolder) bool {
	switch {
	case a.kind == kindLimit || b.kind == kindLimit:
		return a.kind == b.kind && a.place == b.place
	case a.kind == kindShared && b.kind == kindShared:
		return false
	}
	return true
}

// keyLedger is the ledger of one key.
type keyLedger struct {
	inside map[*stressHolder]struct{}
	// Fencing: the largest token of every holder that entered so far, by kind. Holders
	// that exclude each other enter in the order they got the key (else the checks above
	// would have found them inside together), so each must be above those before it.
	maxExclusive int64         // exclusive holders (readers and writers must be above it)
	maxAny       int64         // exclusive and shared holders (writers must be above it)
	maxExclBy    *stressHolder // who got maxExclusive, and maxAny
	maxAnyBy     *stressHolder
	maxPlaceBy   map[string]*stressHolder
	maxPlace     map[string]int64 // per place of the limited key
	limitTokens  map[int64]string // the limited key's tokens: distinct (limit.go, "Limited keys")
}

// stressLedger holds the key ledgers and reports violations.
type stressLedger struct {
	t          testing.TB
	mu         sync.Mutex
	keys       map[string]*keyLedger
	violations int
	reported   map[[2]*stressHolder]bool // pairs (and, with nil, limit counts) reported once
	lastFault  func() string             // what the fault injector did last, for the report
}

func newStressLedger(t testing.TB, lastFault func() string) *stressLedger {
	return &stressLedger{t: t, keys: map[string]*keyLedger{}, reported: map[[2]*stressHolder]bool{}, lastFault: lastFault}
}

func (g *stressLedger) key(k string) *keyLedger {
	kl := g.keys[k]
	if kl == nil {
		kl = &keyLedger{inside: map[*stressHolder]struct{}{}, maxPlace: map[string]int64{}, maxPlaceBy: map[string]*stressHolder{}, limitTokens: map[int64]string{}}
		g.keys[k] = kl
	}
	return kl
}

// violation reports one broken promise (the first few in full).
func (g *stressLedger) violation(format string, args ...any) {
	g.violations++
	if g.violations <= 20 {
		g.t.Errorf("VIOLATION at %s: %s (last fault: %s)", time.Now().Format("15:04:05.000000"),
			fmt.Sprintf(format, args...), g.lastFault())
	}
}

// overlap reports two holders inside together (or too many of a limited key, or a token
// out of order): always a violation.
func (g *stressLedger) overlap(_ []*stressHolder, format string, args ...any) {
	g.violation(format, args...)
}

// enter records h inside and checks it against everyone inside. It reports false, and
// records nothing, when h's lock was no longer valid at its entry (lost on its way).
func (g *stressLedger) enter(h *stressHolder) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	h.entered = time.Now()
	if h.l.validity() <= 0 {
		return false
	}
	kl := g.key(h.l.key)
	g.checkAgainst(kl, h)
	if h.fencing {
		switch h.kind {
		case kindExclusive:
			if h.token <= kl.maxAny {
				g.overlap([]*stressHolder{h, kl.maxAnyBy}, "TOKEN ORDER on %q: %s got token %d, not above %d of an earlier holder: %s", h.l.key, h, h.token, kl.maxAny, kl.maxAnyBy)
			}
		case kindShared:
			if h.token <= kl.maxExclusive {
				g.overlap([]*stressHolder{h, kl.maxExclBy}, "TOKEN ORDER on %q: %s got token %d, not above %d of an earlier writer: %s", h.l.key, h, h.token, kl.maxExclusive, kl.maxExclBy)
			}
		case kindLimit:
			if h.token <= kl.maxPlace[h.place] {
				g.overlap([]*stressHolder{h, kl.maxPlaceBy[h.place]}, "TOKEN ORDER on %q: %s got token %d, not above %d of the place's earlier holder: %s", h.l.key, h, h.token, kl.maxPlace[h.place], kl.maxPlaceBy[h.place])
			}
			if other, dup := kl.limitTokens[h.token]; dup {
				g.violation("TOKEN DISTINCT on limited %q: %s got token %d, already given to %s", h.l.key, h, h.token, other)
			}
			kl.limitTokens[h.token] = h.who
			if h.token > kl.maxPlace[h.place] {
				kl.maxPlace[h.place], kl.maxPlaceBy[h.place] = h.token, h
			}
		}
		if h.kind != kindLimit && h.token > kl.maxAny {
			kl.maxAny, kl.maxAnyBy = h.token, h
		}
		if h.kind == kindExclusive && h.token > kl.maxExclusive {
			kl.maxExclusive, kl.maxExclBy = h.token, h
		}
	}
	kl.inside[h] = struct{}{}
	return true
}

// exit checks h once more (if still valid) and takes it out: called before Release.
func (g *stressLedger) exit(h *stressHolder) {
	g.mu.Lock()
	defer g.mu.Unlock()
	kl := g.key(h.l.key)
	if _, ok := kl.inside[h]; !ok {
		return
	}
	delete(kl.inside, h)
	if h.l.validity() > 0 {
		g.checkAgainst(kl, h)
	}
}

// sweep checks every key's holders against each other.
func (g *stressLedger) sweep() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, kl := range g.keys {
		for h := range kl.inside {
			if h.l.validity() > 0 {
				g.checkAgainst(kl, h)
			}
		}
	}
}

// checkAgainst checks h (valid, or just judged so) against the holders of kl other than h.
func (g *stressLedger) checkAgainst(kl *keyLedger, h *stressHolder) {
	places, limits := 0, []*stressHolder{h}
	for o := range kl.inside {
		if o == h || o.l.validity() <= 0 {
			continue
		}
		if conflicts(h, o) && g.once(h, o) {
			g.overlap([]*stressHolder{h, o}, "TWO HOLDERS of %q: %s is inside while %s is", h.l.key, h, o)
		}
		if h.kind == kindLimit && o.kind == kindLimit {
			places++
			limits = append(limits, o)
		}
	}
	if h.kind == kindLimit && places+1 > h.limit && g.once(h, nil) {
		g.overlap(limits, "LIMIT on %q: %s makes %d holders inside, limit %d", h.l.key, h, places+1, h.limit)
	}
}

// once reports whether the pair a, b (b nil: a alone) was not reported yet, and marks it.
func (g *stressLedger) once(a, b *stressHolder) bool {
	if g.reported[[2]*stressHolder{a, b}] || g.reported[[2]*stressHolder{b, a}] {
		return false
	}
	g.reported[[2]*stressHolder{a, b}] = true
	return true
}

// left is how many holders are still recorded inside (0 once every worker stopped).
func (g *stressLedger) left() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, kl := range g.keys {
		n += len(kl.inside)
	}
	return n
}
