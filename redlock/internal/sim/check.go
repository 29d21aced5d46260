package sim

import (
	"fmt"
	"sync"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The judge: a ledger per key of the holders inside (stress_ledger_test.go's, on the
// exported API), checked at every entry and exit, at simulated instants. Every client of
// the world reads the one simulated clock, so a lock's trust is read at the instant of
// the check: trusted while its Context is not done (Info().Err nil) and within its
// validity (Info().Validity > 0). Two holders that may not be inside together overlap
// exactly when, at the later one's entry, the earlier one is still trusted: checking at
// entries is complete, and no sweep is needed.

type holdKind int

const (
	kindExclusive holdKind = iota
	kindShared
	kindLimit
)

func (k holdKind) String() string { return [...]string{"exclusive", "shared", "limit"}[k] }

// holder is one lock in the ledger.
type holder struct {
	l       *redlock.Lock
	client  int
	asked   time.Time // when its Acquire began
	key     string
	who     string
	kind    holdKind
	limit   int
	set     bool
	fencing bool
	token   int64
	handed  bool
	entered time.Time
	// attempts is the rounds its Acquire took (LockInfo.Attempts): 0 for a handed lock
	// or a joiner, which hold values an earlier holder of the client took.
	attempts int
	// from is, for a handed lock, the holder it was handed from (its client's last on the
	// key): it holds that holder's values in Redis, so what freed them freed it.
	from *holder
	// b is where it lives on the nodes (the state judge: backing.go).
	b backing
}

func (h *holder) String() string {
	i := h.l.Info()
	s := fmt.Sprintf("%s %s", h.who, h.kind)
	if h.set {
		s += " (set)"
	}
	return s + fmt.Sprintf(" token %d handed %v attempts %d renewals %d validity %v err %v entered %s",
		h.token, h.handed, i.Attempts, i.Renewals, i.Validity, i.Err, h.entered.Format("15:04:05.000000"))
}

func trusted(l *redlock.Lock) bool {
	i := l.Info()
	return i.Err == nil && i.Validity > 0
}

// conflicts says whether two holders of one key may not be inside together. A limited
// key's places live under other names than the key's own, so limit holders meet only
// each other (counted apart).
func conflicts(a, b *holder) bool {
	switch {
	case a.kind == kindLimit || b.kind == kindLimit:
		return false
	case a.kind == kindShared && b.kind == kindShared:
		return false
	}
	return true
}

type keyLedger struct {
	inside       map[*holder]struct{}
	maxExclusive int64
	maxAny       int64
	maxExclBy    *holder
	maxAnyBy     *holder
	limitTokens  map[int64]*holder
	// tokens are the fenced holders' tokens as they entered (writers and readers), for
	// judging a token below an earlier one's (tokenFreed).
	tokens []tokenEntry
	// resource: the writes a fenced store accepted (token order), for the GC pauses.
	resource   int64
	resourceBy *holder
	// forces are the operators' force releases of the key (forceWindow), landed the
	// moments their deletes ran on a node.
	forces []forceWindow
	landed []forceLanding
}

// tokenEntry is a fenced holder's token, and when it entered.
type tokenEntry struct {
	token   int64
	kind    holdKind
	entered time.Time
}

// forceLanding is a force release's compare-and-delete running on a node, in time or
// late (held by a partition, read by a paused node when it resumes): it deletes what
// the force read during its call, if still there.
type forceLanding struct {
	client int
	at     time.Time
}

// forceWindow is one force release of a key by a client, from its call until it
// returned. A force release frees the holders it read (during its call): the forcing
// client marks its own holders lost, while another client's holder learns it at its
// next renewal (the narrow race any operator override has, which fencing guards:
// force.go). So another client's holder that the force may have read, and that was
// inside (or whose winning round may have been out) when one of its deletes ran, is
// exempt from the overlap checks (forced; its tokens are still checked).
type forceWindow struct {
	client     int
	start, end time.Time
}

// Violation is one broken promise.
type Violation struct {
	At   time.Duration // simulated time since the schedule began
	Kind string        // "two holders", "limit", "token order", "liveness", "leak", "idle", ...
	What string
}

func (v Violation) String() string { return fmt.Sprintf("%v %s: %s", v.At, v.Kind, v.What) }

// ledger holds the key ledgers and the violations.
type ledger struct {
	mu                          sync.Mutex
	t0                          time.Time
	keys                        map[string]*keyLedger
	violations                  []Violation
	reported                    map[[2]*holder]bool
	staleRefused, staleAccepted int
	forceSlack                  time.Duration // a round under way when a force ended lands within it
	lastFault                   func() string
	// handing: per client and key, the mode of the lock its last holder released (a
	// local handoff hands that lock to the next waiter of the same client): a handed
	// lock must be of the mode its holder asked for (mode.go: no handoff crosses modes).
	// gave is that holder: a handed lock holds its values (forced).
	handing map[handKey]holdMode
	gave    map[handKey]*holder
	// note, when set (SIM_TRACE), traces entries and exits.
	note func(format string, args ...any)
	// onEnter runs at every entry (g.mu held): the world judges the holder's backing at
	// that instant (backing.go).
	onEnter func()
}

func newLedger(t0 time.Time, lastFault func() string) *ledger {
	return &ledger{t0: t0, keys: map[string]*keyLedger{}, reported: map[[2]*holder]bool{}, lastFault: lastFault,
		handing: map[handKey]holdMode{}, gave: map[handKey]*holder{}}
}

type handKey struct {
	client int
	key    string
}

// holdMode is what a lock was asked for, as far as a handoff must keep it.
type holdMode struct {
	kind    holdKind
	set     bool
	fencing bool
}

// released notes the mode of a lock its holder is about to release or hand over.
func (g *ledger) released(h *holder) {
	if h.kind != kindExclusive {
		return // only an exclusive lock has a line to be handed on in (limit.go, readgroup.go)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handing[handKey{h.client, h.key}] = holdMode{h.kind, h.set, h.fencing}
	g.gave[handKey{h.client, h.key}] = h
}

// checkHanded judges a lock at its holder's entry: a reader and a limit holder never get
// a handed lock (readers have no line; places are not handed on), and a handed lock is
// of the mode of the lock its client released last on that key.
func (g *ledger) checkHandedLocked(h *holder) {
	if !h.handed {
		return
	}
	if h.kind != kindExclusive {
		g.violationLocked("mode", "%s holds a handed lock (a %s is never handed one)", h, h.kind)
		return
	}
	if from, ok := g.handing[handKey{h.client, h.key}]; ok && from != (holdMode{h.kind, h.set, h.fencing}) {
		g.violationLocked("mode", "%s holds a lock handed from a %s holder (set %v, fencing %v)", h, from.kind, from.set, from.fencing)
	}
}

func (g *ledger) key(k string) *keyLedger {
	kl := g.keys[k]
	if kl == nil {
		kl = &keyLedger{inside: map[*holder]struct{}{}, limitTokens: map[int64]*holder{}}
		g.keys[k] = kl
	}
	return kl
}

func (g *ledger) violation(kind, format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.violationLocked(kind, format, args...)
}

func (g *ledger) violationLocked(kind, format string, args ...any) {
	what := fmt.Sprintf(format, args...)
	if g.lastFault != nil {
		what += " (last fault: " + g.lastFault() + ")"
	}
	g.violations = append(g.violations, Violation{At: time.Since(g.t0), Kind: kind, What: what})
}

// enter records h inside and checks it against everyone inside. It reports false, and
// records nothing, when h's lock was no longer trusted at its entry.
func (g *ledger) enter(h *holder) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	h.entered = time.Now()
	if !trusted(h.l) {
		if g.note != nil {
			g.note("%s on %q not entered (not trusted): %s", h.who, h.key, h)
		}
		return false
	}
	if g.note != nil {
		g.note("%s on %q enters: %s", h.who, h.key, h)
	}
	kl := g.key(h.key)
	if h.handed {
		h.from = g.gave[handKey{h.client, h.key}]
	}
	g.checkHandedLocked(h)
	g.checkAgainst(kl, h)
	if h.fencing {
		switch h.kind {
		case kindExclusive:
			if h.token <= kl.maxAny && !g.tokenFreed(kl, h, false) {
				g.violationLocked("token order", "on %q: %s got token %d, not above %d of an earlier holder: %s", h.key, h, h.token, kl.maxAny, kl.maxAnyBy)
			}
		case kindShared:
			if h.token <= kl.maxExclusive && !g.tokenFreed(kl, h, true) {
				g.violationLocked("token order", "on %q: %s got token %d, not above %d of an earlier writer: %s", h.key, h, h.token, kl.maxExclusive, kl.maxExclBy)
			}
		case kindLimit:
			if other := kl.limitTokens[h.token]; other != nil {
				g.violationLocked("token distinct", "on limited %q: %s got token %d, already given to %s", h.key, h, h.token, other)
			}
			kl.limitTokens[h.token] = h
		}
		if h.kind != kindLimit {
			kl.tokens = append(kl.tokens, tokenEntry{h.token, h.kind, h.entered})
		}
		if h.kind != kindLimit && h.token > kl.maxAny {
			kl.maxAny, kl.maxAnyBy = h.token, h
		}
		if h.kind == kindExclusive && h.token > kl.maxExclusive {
			kl.maxExclusive, kl.maxExclBy = h.token, h
		}
	}
	kl.inside[h] = struct{}{}
	h.b = lockBacking(h.l)
	if g.onEnter != nil {
		g.onEnter()
	}
	return true
}

// write is a fenced write by h to the key's resource, which refuses tokens below the
// largest it accepted. It reports whether the resource accepted it. A write refused while
// h is still trusted (its token is stale although it holds the key) is a violation; one
// refused after h's validity passed is the fencing doing its job (a GC pause).
func (g *ledger) write(h *holder) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h.kind != kindExclusive || !h.fencing {
		return true
	}
	kl := g.key(h.key)
	ok := h.token >= kl.resource
	switch {
	case ok:
		kl.resource, kl.resourceBy = h.token, h
		if !trusted(h.l) {
			g.staleAccepted++
		}
	case trusted(h.l) && !g.forced(kl, h, g.forceSlack):
		// (A holder a force release freed is refused as a stale one: fencing at work.)
		g.violationLocked("fenced write", "on %q: %s (trusted) was refused: token %d below %d written by %s", h.key, h, h.token, kl.resource, kl.resourceBy)
	default:
		g.staleRefused++
	}
	return ok
}

// exit checks h once more (if still trusted) and takes it out: called before Release.
func (g *ledger) exit(h *holder) {
	g.mu.Lock()
	defer g.mu.Unlock()
	kl := g.key(h.key)
	if _, ok := kl.inside[h]; !ok {
		return
	}
	delete(kl.inside, h)
	if g.note != nil {
		g.note("%s on %q exits: %s", h.who, h.key, h)
	}
	if trusted(h.l) {
		g.checkAgainst(kl, h)
	}
}

// forced reports whether h may have been freed under its feet by a force release
// (freedAt).
func (g *ledger) forced(kl *keyLedger, h *holder, slack time.Duration) bool {
	_, ok := g.freedAt(kl, h, slack)
	return ok
}

// freedAt reports the first delete of a force release that may have freed h under its
// feet: another client's, whose reads may have seen h's values (the call was under way at
// or after h asked: its reads run during the call, and its deletes, however late they
// land, delete only the values read), and that ran while h was inside or while its
// winning round may have been out (for a set, since it asked). A holder of the forcing
// client is never exempt: the client marks its holders lost and gives up locks taken
// while it forces (force.go). A handed lock holds the values of the holder it was handed
// from, whatever freed those freed it, also before it was handed (its client learns it
// at the lock's next renewal, as its giver would have: the handoff takes no round trip).
// A joiner (no round of its own: Attempts 0) holds values an earlier reader of its
// client took, when the ledger does not know: any delete of another client's force that
// ran while it was inside may have freed it, and so may one that ran before it asked,
// after its group's entry was taken: it joins within joinWindowMax of that, trusting the
// entry as the reader that took it does (that reader learns of the delete at its next
// renewal, and so does the joiner).
func (g *ledger) freedAt(kl *keyLedger, h *holder, slack time.Duration) (time.Time, bool) {
	if h.handed && h.from != nil {
		return g.freedAt(kl, h.from, slack)
	}
	entered := h.entered
	if entered.IsZero() {
		entered = time.Now()
	}
	joiner := h.attempts == 0 && !h.handed && h.kind == kindShared
	from := entered.Add(-slack) // a delete before h's winning round freed nothing of h
	asked := h.asked
	switch {
	case h.set:
		from = h.asked // AcquireAll took its first keys long before it returned
	case joiner:
		from = entered.Add(-slack - joinWindowMax) // its group's entry was taken by then
		asked = from
	}
	for _, l := range kl.landed { // in the order they ran
		if l.client == h.client || l.at.Before(asked) || l.at.Before(from) {
			continue
		}
		// A lock with rounds of its own holds values written after it asked.
		if kl.underWay(l, h.asked) || h.attempts == 0 {
			return l.at, true
		}
	}
	return time.Time{}, false
}

// joinWindowMax is the longest a reader group takes joiners after its entry was taken
// (redlock's joinWindow, readgroup.go: keep them alike).
const joinWindowMax = 5 * time.Millisecond

// tokenFreed reports whether h's token may be below an earlier holder's because a force
// release freed h first (freedAt): every earlier holder with a token not below h's
// (writers only, for a reader) entered at or after that delete, so its grants may have
// followed it on the nodes h had, and the counters there gave it the larger token. That
// is fencing doing its job in the operator override's race (docs/safety.md: a holder of
// another client learns of a force release at its next renewal, and a lock its client
// hands on before then holds the same freed values): a fenced store refuses h's writes
// once the later holder wrote. An earlier holder with a larger token that entered before
// any delete that may have freed h is still a violation: nothing had freed h's values,
// so its grants could not come after h's.
func (g *ledger) tokenFreed(kl *keyLedger, h *holder, writersOnly bool) bool {
	at, ok := g.freedAt(kl, h, g.forceSlack)
	if !ok {
		return false
	}
	for _, e := range kl.tokens {
		if e.token >= h.token && (!writersOnly || e.kind == kindExclusive) && e.entered.Before(at) {
			return false
		}
	}
	return true
}

// underWay reports whether a force release of the key by l's client that began by l's
// landing was still under way at t: its reads may have seen values written from t on.
func (kl *keyLedger) underWay(l forceLanding, t time.Time) bool {
	for _, f := range kl.forces {
		if f.client == l.client && !f.start.After(l.at) && (f.end.IsZero() || !f.end.Before(t)) {
			return true
		}
	}
	return false
}

// forceLanded notes a force release's compare-and-delete running on a node.
func (g *ledger) forceLanded(key string, client int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	kl := g.key(key)
	kl.landed = append(kl.landed, forceLanding{client: client, at: time.Now()})
}

// forceBegins and forceEnds bracket a client's ForceRelease of key.
func (g *ledger) forceBegins(key string, client int) *forceWindow {
	g.mu.Lock()
	defer g.mu.Unlock()
	kl := g.key(key)
	kl.forces = append(kl.forces, forceWindow{client: client, start: time.Now()})
	return &kl.forces[len(kl.forces)-1]
}

func (g *ledger) forceEnds(key string, client int, start time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	kl := g.key(key)
	for i := range kl.forces {
		if f := &kl.forces[i]; f.client == client && f.start.Equal(start) && f.end.IsZero() {
			f.end = time.Now()
		}
	}
}

func (g *ledger) checkAgainst(kl *keyLedger, h *holder) {
	limits := 0
	if g.forced(kl, h, g.forceSlack) {
		return
	}
	for o := range kl.inside {
		if o == h || !trusted(o.l) || g.forced(kl, o, g.forceSlack) {
			continue
		}
		if conflicts(h, o) && g.once(h, o) {
			g.violationLocked("two holders", "of %q: %s is inside while %s is", h.key, h, o)
		}
		if h.kind == kindLimit && o.kind == kindLimit {
			limits++
		}
	}
	if h.kind == kindLimit && limits+1 > h.limit && g.once(h, nil) {
		g.violationLocked("limit", "on %q: %s makes %d holders inside, limit %d", h.key, h, limits+1, h.limit)
	}
}

func (g *ledger) once(a, b *holder) bool {
	if g.reported[[2]*holder{a, b}] || g.reported[[2]*holder{b, a}] {
		return false
	}
	g.reported[[2]*holder{a, b}] = true
	return true
}

// left is how many holders are still recorded inside.
func (g *ledger) left() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, kl := range g.keys {
		n += len(kl.inside)
	}
	return n
}
