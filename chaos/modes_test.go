package main

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Readers share a key; a writer with a reader inside, or a reader with a writer inside,
// is a violation.
func TestLedgerSharedMode(t *testing.T) {
	l, _, c := newTestLedger()
	r1, _, _ := l.enterMode("k", modeShared, 0, 100, true, "r1", "0")
	c.add(time.Millisecond)
	r2, ok, _ := l.enterMode("k", modeShared, 1, 101, true, "r2", "0")
	if !ok || l.snapshot().Violations != 0 {
		t.Fatalf("two readers: ok %v, %+v", ok, l.snapshot())
	}
	if l.mostInside()[modeShared] != 2 {
		t.Fatalf("most readers %v", l.mostInside())
	}
	w, _, _ := l.enterMode("k", modeExclusive, 2, 102, true, "w", "0")
	if got := l.snapshot().Violations; got != 2 {
		t.Fatalf("a writer among 2 readers: %d violations, want 2", got)
	}
	l.leave(r1, false)
	l.leave(r2, false)
	l.enterMode("k", modeShared, 0, 103, true, "r3", "0")
	if got := l.snapshot().Violations; got != 3 {
		t.Fatalf("a reader with a writer inside: %d violations, want 3", got)
	}
	l.leave(w, false)
}

// Readers' tokens may arrive in any order among themselves, but not below a writer's; a
// writer's must be above everyone's.
func TestLedgerSharedFencing(t *testing.T) {
	l, _, _ := newTestLedger()
	r1, _, _ := l.enterMode("k", modeShared, 0, 105, true, "r1", "0")
	r2, ok, _ := l.enterMode("k", modeShared, 1, 104, true, "r2", "0")
	if !ok || l.snapshot().Regressions != 0 || !l.write(r2) {
		t.Fatal("a reader below another reader's token was refused")
	}
	l.leave(r1, false)
	l.leave(r2, false)
	if _, ok, why := l.enterMode("k", modeExclusive, 0, 105, true, "w", "0"); ok || why != "token regression" {
		t.Fatalf("a writer at a reader's token: ok %v %q", ok, why)
	}
	w, _, _ := l.enterMode("k", modeExclusive, 0, 110, true, "w2", "0")
	l.leave(w, false)
	if _, ok, why := l.enterMode("k", modeShared, 0, 108, true, "r3", "0"); ok || why != "token regression" {
		t.Fatalf("a reader below a writer's token: ok %v %q", ok, why)
	}
}

// Up to the limit inside one key; one more is a violation.
func TestLedgerLimitMode(t *testing.T) {
	l, _, _ := newTestLedger()
	var vs []*visit
	for i := range chaosLimit {
		v, ok, _ := l.enterMode("p", modeLimit, i, int64(200-i), true, "h", "0") // tokens per place: any order
		if !ok {
			t.Fatalf("holder %d refused", i)
		}
		vs = append(vs, v)
	}
	if got := l.snapshot(); got.Violations != 0 || got.Regressions != 0 || l.mostInside()[modeLimit] != chaosLimit {
		t.Fatalf("%d holders: %+v, most %v", chaosLimit, got, l.mostInside())
	}
	l.enterMode("p", modeLimit, 0, 300, true, "one too many", "0")
	if got := l.snapshot().Violations; got != 1 {
		t.Fatalf("holder %d of a key limited to %d: %d violations, want 1", chaosLimit+1, chaosLimit, got)
	}
	if !strings.Contains(strings.Join(l.failureLog(), "\n"), "limited to 3") {
		t.Fatalf("failure log: %q", l.failureLog())
	}
}

func TestLockedKeys(t *testing.T) {
	for _, tc := range []struct {
		key, tok string
		keys     []string
		tokens   map[string]int64
	}{
		{"res:1", "42", []string{"res:1"}, map[string]int64{"res:1": 42}},
		{"acct:a acct:b", "acct:a=7,acct:b=9", []string{"acct:a", "acct:b"}, map[string]int64{"acct:a": 7, "acct:b": 9}},
		{"acct:a acct:b", "", []string{"acct:a", "acct:b"}, map[string]int64{}},
		{"", "", nil, map[string]int64{}},
	} {
		keys, tokens := lockedKeys(tc.key, tc.tok)
		if !reflect.DeepEqual(keys, tc.keys) && !(len(keys) == 0 && len(tc.keys) == 0) || !reflect.DeepEqual(tokens, tc.tokens) {
			t.Errorf("%q %q: %v %v", tc.key, tc.tok, keys, tokens)
		}
	}
}

// The generated Caddyfile has a redlock handler per route with the common options.
func TestModeRoutes(t *testing.T) {
	out := modeRoutes("\t\tfencing\n")
	for _, want := range []string{"redlock @s {", "shared GET", "limit 3", "path /t/{from}/{to} acct:{from} acct:{to}", "@r path /r/*"} {
		if !strings.Contains(out, want) {
			t.Errorf("routes lack %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "fencing") != 4 {
		t.Errorf("common options not in every handler:\n%s", out)
	}
}

// modeRequest is a request as Caddy forwards it to the upstream: its keys (lock order),
// their fencing tokens and the mode Caddy took them in.
func modeRequest(method, path, mode, keys, tokens string) *http.Request {
	r := httptest.NewRequest(method, path, nil)
	r.Header.Set(headerKey, keys)
	r.Header.Set(headerToken, tokens)
	r.Header.Set(headerMode, mode)
	return r
}

func enterReq(u *upstream, r *http.Request, inst int, id string) (*visits, bool, string) {
	return u.enter(r, r.Header.Get(headerKey), inst, id)
}

// Several keys: a visit per key, judged per key. Transfers sharing one account overlap on
// it (one violation); transfers on other accounts do not; a key without its token is
// unlocked and none of the request's keys stay inside.
func TestUpstreamSeveralKeysPerKey(t *testing.T) {
	l, _, _ := newTestLedger()
	u := &upstream{led: l}
	ab, ok, _ := enterReq(u, modeRequest("POST", "/t/b/a", modeExclusive, "acct:a acct:b", "acct:a=5,acct:b=6"), 0, "ab")
	if !ok || len(ab.all) != 2 || ab.token != 6 {
		t.Fatalf("b->a: ok %v %+v", ok, ab)
	}
	bc, ok, _ := enterReq(u, modeRequest("POST", "/t/b/c", modeExclusive, "acct:b acct:c", "acct:b=7,acct:c=3"), 1, "bc")
	if !ok || l.snapshot().Violations != 1 {
		t.Fatalf("b->c while b->a is inside: ok %v, %+v", ok, l.snapshot())
	}
	if !strings.Contains(strings.Join(l.failureLog(), "\n"), "key acct:b: bc") {
		t.Fatalf("the violation is not on acct:b: %q", l.failureLog())
	}
	de, ok, _ := enterReq(u, modeRequest("POST", "/t/d/e", modeExclusive, "acct:d acct:e", "acct:d=1,acct:e=1"), 2, "de")
	if !ok || l.snapshot().Violations != 1 {
		t.Fatalf("d->e counted as an overlap: %+v", l.snapshot())
	}
	for _, vs := range []*visits{ab, bc, de} {
		vs.leave(false)
	}
	if _, ok, why := enterReq(u, modeRequest("POST", "/t/f/g", modeExclusive, "acct:f acct:g", "acct:f=9"), 0, "fg"); ok || why != "no lock" {
		t.Fatalf("a key without its token: ok %v %q", ok, why)
	}
	if n := l.insideCount(); n != 0 {
		t.Fatalf("%d visits left inside after a refused request", n)
	}
	if got := l.mostPerKey(); got["acct:b"] != 2 || got["acct:d"] != 1 {
		t.Fatalf("most per key %v", got)
	}
	if got := l.snapshot().Mismatched; got != 0 {
		t.Fatalf("%d mismatched, want 0", got)
	}
}

// The upstream judges the lock the route asks for: a writer Caddy took shared is a wrong
// lock, and judged as the writer it is (its overlap with a reader is a violation); so is
// a transfer holding one of its two accounts, or keys out of sorted order.
func TestUpstreamWrongLock(t *testing.T) {
	l, _, _ := newTestLedger()
	u := &upstream{led: l}
	r, ok, _ := enterReq(u, modeRequest("GET", "/s/doc", modeShared, "sres:doc", "10"), 0, "reader")
	if !ok || l.snapshot().Mismatched != 0 {
		t.Fatalf("a reader: ok %v %+v", ok, l.snapshot())
	}
	w, _, _ := enterReq(u, modeRequest("PUT", "/s/doc", modeShared, "sres:doc", "11"), 1, "writer taken shared")
	if got := l.snapshot(); got.Mismatched != 1 || got.Violations != 1 {
		t.Fatalf("a writer taken shared among a reader: %+v", got)
	}
	r.leave(false)
	w.leave(false)
	enterReq(u, modeRequest("POST", "/t/a/b", modeExclusive, "acct:a", "5"), 0, "one account")
	enterReq(u, modeRequest("POST", "/t/a/b", modeExclusive, "acct:b acct:a", "acct:a=6,acct:b=6"), 0, "unsorted")
	enterReq(u, modeRequest("GET", "/l/pool", modeExclusive, "lres:pool", "1"), 0, "limit taken exclusive")
	if got := l.snapshot(); got.Mismatched != 4 || got.bad() == 0 {
		t.Fatalf("wrong locks: %+v", got)
	}
	if !strings.Contains(strings.Join(l.failureLog(), "\n"), "WRONG LOCK: one account") {
		t.Fatalf("failure log: %q", l.failureLog())
	}
}

func TestWantLock(t *testing.T) {
	for _, tc := range []struct {
		method, path, mode string
		keys               []string
	}{
		{"GET", "/r/hot0", modeExclusive, []string{"res:hot0"}},
		{"GET", "/s/doc0", modeShared, []string{"sres:doc0"}},
		{"PUT", "/s/doc0", modeExclusive, []string{"sres:doc0"}},
		{"POST", "/l/pool", modeLimit, []string{"lres:pool"}},
		{"POST", "/t/c/a", modeExclusive, []string{"acct:a", "acct:c"}},
		{"POST", "/t/a/a", modeExclusive, []string{"acct:a"}},
	} {
		mode, keys := wantLock(tc.method, tc.path)
		if mode != tc.mode || !reflect.DeepEqual(keys, tc.keys) {
			t.Errorf("%s %s: %s %v, want %s %v", tc.method, tc.path, mode, keys, tc.mode, tc.keys)
		}
	}
}

// The most holders inside a limited key at once is recorded per key (the report shows the
// limit was reached); its holders' tokens come from separate places, in any order.
func TestLedgerMostPerKeyLimit(t *testing.T) {
	l, _, _ := newTestLedger()
	a, _, _ := l.enterMode(limitKey, modeLimit, 0, 10, true, "a", "0")
	b, _, _ := l.enterMode(limitKey, modeLimit, 1, 3, true, "b", "0")
	l.leave(a, false)
	c, _, _ := l.enterMode(limitKey, modeLimit, 2, 7, true, "c", "0")
	if got := l.mostPerKey()[limitKey]; got != 2 || l.snapshot().bad() != 0 {
		t.Fatalf("most %d, %+v", got, l.snapshot())
	}
	l.leave(b, false)
	l.leave(c, false)
}

func TestModeNote(t *testing.T) {
	rs := []result{{route: "shared GET", status: 200}, {route: "shared GET", status: 503}, {route: "transfer", status: 200}, {key: "hot0", hot: true, status: 200}}
	want := "lock modes (200/sent): shared GET 1/2, shared PUT 0/0, limit 0/0, transfer 1/1"
	if got := modeNote(rs); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if modeRoute("PUT", "/s/doc0") != "shared PUT" || modeRoute("GET", "/r/x") != "" {
		t.Fatal("modeRoute")
	}
}

func TestWaitedOut(t *testing.T) {
	rs := []result{{route: "transfer", status: 200}, {route: "limit", status: 423}}
	if got := waitedOut(rs); got != nil {
		t.Fatalf("no transfer waited out: %q", got)
	}
	rs = append(rs, result{route: "transfer", status: 423})
	if got := waitedOut(rs); len(got) != 1 || !strings.Contains(got[0], "1 of 2 transfers") {
		t.Fatalf("got %q", got)
	}
}
