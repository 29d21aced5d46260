package main

import (
	"sync"
	"time"
)

// pauseLog records when each Caddy instance was stopped with SIGSTOP, so the ledger can
// tell a holder that slept past its lock (expected, fenced) from a mutual-exclusion
// failure. A pause is recorded from just before SIGSTOP to just after SIGCONT.
type pauseLog struct {
	mu sync.Mutex
	w  map[int][]window
}

type window struct {
	from, to time.Time // to is zero while the pause lasts
}

func newPauseLog() *pauseLog { return &pauseLog{w: map[int][]window{}} }

func (p *pauseLog) begin(inst int, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.w[inst] = append(p.w[inst], window{from: at})
}

func (p *pauseLog) end(inst int, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := p.w[inst]
	if n := len(ws); n > 0 && ws[n-1].to.IsZero() {
		ws[n-1].to = at
	}
}

// pausedSince reports whether inst was paused at some moment in [since, now].
func (p *pauseLog) pausedSince(inst int, since, now time.Time) bool {
	return p.pausedWithin(inst, since, now)
}

// pausedWithin reports whether a pause of inst overlaps [from, to].
func (p *pauseLog) pausedWithin(inst int, from, to time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.w[inst] {
		if w.from.After(to) {
			continue
		}
		if w.to.IsZero() || !w.to.Before(from) {
			return true
		}
	}
	return false
}
