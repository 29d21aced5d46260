package main

import (
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
