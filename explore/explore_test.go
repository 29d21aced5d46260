package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestExplore runs a few seconds of the explorer (go test ./... and -short alike): a
// smoke test of the engine against real Caddy and redis-server; `make explore` is the
// search.
func TestExplore(t *testing.T) {
	d := 8 * time.Second
	if testing.Short() {
		d = 4 * time.Second
	}
	var out bytes.Buffer
	code := run(&out, options{d: d, batch: maxBatch, replay: 1, first: uint64(time.Now().UnixNano()/1000) % 1_000_000_000})
	last := strings.TrimSpace(out.String())
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	t.Log(last)
	if code != 0 {
		t.Fatalf("explore failed:\n%s", out.String())
	}
	if !strings.HasPrefix(last, "EXPLORE cases=") || strings.HasPrefix(last, "EXPLORE cases=0 ") {
		t.Fatalf("no cases ran:\n%s", out.String())
	}
}

// A seed names its case: drawing it twice gives the same case.
func TestGenerateIsSeeded(t *testing.T) {
	for seed := uint64(1); seed < 200; seed++ {
		a, b := generate(seed), generate(seed)
		if a.shape != b.shape || a.ending != b.ending || len(a.reqs) != len(b.reqs) || a.lock != b.lock {
			t.Fatalf("seed %d drew two cases: %+v and %+v", seed, a, b)
		}
	}
}

// Every shape and every ending is drawn within a few hundred seeds.
func TestEveryShapeAndEndingDrawn(t *testing.T) {
	avoidIssue38 = false
	seen := map[string]uint64{}
	for seed := uint64(1); seed < 2000; seed++ {
		c := generate(seed)
		if _, ok := seen[c.shape]; !ok {
			seen[c.shape] = seed
		}
		if _, ok := seen[c.ending]; !ok {
			seen[c.ending] = seed
		}
	}
	for _, s := range append(append(append([]string(nil), shapes...), newShapes...), append(endings, shapeWebsocket, endStreamTimeout)...) {
		if _, ok := seen[s]; !ok {
			t.Errorf("%s never drawn in 2000 seeds", s)
		}
	}
	t.Logf("first seed of each: %v", seen)
}

// Every mix (blocks of one case that differ on one key: mix.go) is drawn within a few
// hundred seeds, with its second block on the outer's keys.
func TestEveryMixDrawn(t *testing.T) {
	avoidIssue38 = false
	count := map[string]int{}
	for seed := uint64(1); seed < 2000; seed++ {
		c := generate(seed)
		if c.mix == "" {
			continue
		}
		count[c.mix]++
		if c.blocks[1].keys != c.blocks[0].keys {
			t.Fatalf("seed %d: mix %s with keys %s and %s", seed, c.mix, c.blocks[0].keys, c.blocks[1].keys)
		}
	}
	for _, m := range []string{mixDry, mixLimit, mixMode, mixMaxHold, mixFastCGIErr} {
		if count[m] == 0 {
			t.Errorf("mix %s never drawn in 2000 seeds", m)
		}
	}
	t.Logf("mixes in 2000 seeds: %v", count)
}

// Keys fed by vars and by map (keyvia.go) are both drawn, with plainly spelled paths.
func TestKeyViaDrawn(t *testing.T) {
	count := map[string]int{}
	for seed := uint64(1); seed < 400; seed++ {
		c := generate(seed)
		count[c.keyVia]++
		for _, q := range c.reqs {
			if c.keyVia != viaPath && q.spell != "plain" {
				t.Fatalf("seed %d: keys via %s with a path spelled %s", seed, c.keyVia, q.spell)
			}
		}
	}
	if count[viaVars] == 0 || count[viaMap] == 0 {
		t.Errorf("keys via vars or map never drawn in 400 seeds: %v", count)
	}
	t.Logf("keys via in 400 seeds: %v", count)
}

// request_body's cap (bodymax.go) is drawn, with requests whose told length is over it.
func TestBodyMaxDrawn(t *testing.T) {
	cases, big := 0, 0
	for seed := uint64(1); seed < 400; seed++ {
		c := generate(seed)
		if !c.bodyMax {
			continue
		}
		cases++
		for _, q := range c.reqs {
			if c.tooBigTold(q) {
				big++
			}
		}
	}
	if cases == 0 || big == 0 {
		t.Errorf("request_body drawn in %d cases of 400, with %d requests over it", cases, big)
	}
	t.Logf("request_body in %d cases of 400, %d requests over it with their length told", cases, big)
}
