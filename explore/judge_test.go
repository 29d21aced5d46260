package main

import (
	"strings"
	"testing"
	"time"
)

// The judge holds each piece of work to the strictest rule of the enforcing blocks
// around it that name the key (mix.go), and a dry-run block to none.
func TestJudgeStrictestBlock(t *testing.T) {
	t0 := time.Now()
	three := func(c *caseSpec) []work {
		var ws []work
		for i, q := range c.reqs {
			ws = append(ws, work{req: q.id, lane: c.lane, role: "work", via: "http", n: 1,
				start: t0.Add(time.Duration(i) * 10 * time.Millisecond), end: t0.Add(time.Second), done: true, how: endCompleted})
		}
		return ws
	}
	mk := func(mode string, limit int, blocks ...block) *caseSpec {
		c := &caseSpec{lane: "c1", shape: shapeNested, ending: endClean, blocks: blocks,
			lock: lockSpec{mode: mode, limit: limit}}
		for i := range 3 {
			c.reqs = append(c.reqs, request{id: "c1." + string(rune('0'+i)), keyID: "a", method: "GET"})
		}
		return c
	}
	for _, tc := range []struct {
		name string
		c    *caseSpec
		want string // a violation containing this, or "" for none
	}{
		{"limit 3 around limit 2: three at once break limit 2",
			mk(modeLimit, 3, block{where: "outer", keys: keyID}, block{where: "inner", keys: keyID, mode: modeLimit, limit: 2}), "under limit 2"},
		{"limit 3 around limit 4: three at once are within both",
			mk(modeLimit, 3, block{where: "outer", keys: keyID}, block{where: "inner", keys: keyID, mode: modeLimit, limit: 4}), ""},
		{"readers inside an exclusive block are exclusive",
			mk(modeExclusive, 0, block{where: "outer", keys: keyID}, block{where: "inner", keys: keyID, mode: modeShared}), "(exclusive)"},
		{"readers inside a dry-run exclusive block are readers",
			mk(modeExclusive, 0, block{where: "outer", keys: keyID, dryRun: true}, block{where: "inner", keys: keyID, mode: modeShared}), ""},
		{"a dry-run block alone holds nothing",
			mk(modeExclusive, 0, block{where: "outer", keys: keyID, dryRun: true}), ""},
	} {
		v := tc.c.judge(three(tc.c), nil, faults{}, nil, nil)
		wantViolation(t, tc.name, v.violations, tc.want)
	}
}

// wantViolation checks a judgement: a violation containing want, or none when want is "".
func wantViolation(t *testing.T, name string, violations []string, want string) {
	t.Helper()
	got := strings.Join(violations, "\n")
	switch {
	case want == "" && got != "":
		t.Errorf("%s: violations %q, want none", name, got)
	case want != "" && !strings.Contains(got, want):
		t.Errorf("%s: violations %q, want one with %q", name, got, want)
	}
}
