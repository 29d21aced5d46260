package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The all-wait program: AcquireAll keeps the keys it took while it waits for a later
// one (redlock/multi.go: "Claim: every lock AcquireAll returns is held", kept by
// renewer.renewWhileWaiting). Without those renewals nothing unsafe happens: the first
// key's lock lapses, its Context ends the wait, the set is given back and taken again
// (multi.go, acquireSet), and every lock returned is still trusted. What breaks is the
// promise that the locks taken are kept: a lock lapses while its holder still wants it,
// with nothing to explain it. The conflict and state judges cannot see that, so the
// program judges it itself ("lapsed"): in a span where no fault runs, and none ran for a
// ttl before, no lock may be lost while its holder wants it.
//
// A client Q takes the program's key allWaitBusy, keeps it alive (KeepAlive every ttl/4)
// and holds it 1.25 to 1.75 ttl; a sixteenth of a ttl after Q asked, another client P
// asks AcquireAll for allWaitFirst and allWaitBusy (in that order: AcquireAll sorts them)
// with a wait a ttl longer than Q's hold. P takes allWaitFirst at once and waits more
// than a ttl for allWaitBusy: its first lock lives through the wait only by its renewals.
// Judged: Q's lock is trusted until Q releases it, and the lock of allWaitFirst that
// AcquireAll returns is the one it took first (LockInfo.AcquiredAt is when the call
// began: a set given back and taken again returns a lock of a later Acquire).
//
// It runs once every planned fault is over (two node timeouts after its end, a ttl after
// a data loss: a quarantine), in the schedule's quiet part (from Duration, while the
// load goes on), in half the schedules, from a stream of its own: it is left out when the
// faults end too late for it to start before the load stops. The schedule up to Duration
// is the same whether or not it is drawn, so the regression seeds keep their schedules
// (seeds_test.go). SIM_SKIP=all-wait leaves it out.

// The program's keys, which no worker asks for.
const (
	allWaitFirst = "all-wait-1" // P's first key: free, taken at once
	allWaitBusy  = "all-wait-2" // Q's, kept alive longer than a ttl while P waits for it
)

// allWait adds the program to plan (the other faults, drawn), when the span is calm.
func (w *World) allWait(p params, plan []fault) []fault {
	cfg := w.cfg
	if cfg.Skip["all-wait"] || cfg.Clients < 2 {
		return plan
	}
	r := rand.New(rand.NewPCG(w.seed, 0xa11a))
	if r.IntN(2) != 0 {
		return plan
	}
	ttl := p.ttl
	// After every planned fault is over: a ttl after a node lost data (its quarantine),
	// two node timeouts after the others (a healed link's or a resumed node's backlog).
	calm := cfg.Duration
	for _, f := range plan {
		end := f.at + f.dur + 2*p.nodeTimeout
		switch f.kind {
		case fRestart, fRestartLastSecond, fFlush, fMajorityRestart, fFailover, fSnapRestart, fClockJump:
			end += ttl
		}
		calm = max(calm, end)
	}
	at := calm + time.Duration(r.Int64N(int64(ttl/4)))
	if at >= cfg.Duration+cfg.Quiet/2 {
		return plan // the load stops then (workload.stop): too late to start
	}
	hold := ttl + ttl/4 + time.Duration(r.Int64N(int64(ttl/2)))
	ask := at + ttl/16
	wait := hold + ttl
	cl := r.Perm(cfg.Clients)
	return append(plan,
		fault{kind: fHold, at: at, client: cl[0], key: allWaitBusy, by: ttl / 2, dur: hold},
		fault{kind: fHold, at: ask, client: cl[1], key: allWaitFirst, by: wait, dur: 2 * time.Millisecond})
}

// allWaitHold runs a hold of the program (its fHold faults, told apart by their keys),
// and reports whether key was one of the program's.
func (wl *workload) allWaitHold(ci int, key string, wait, hold time.Duration) bool {
	switch key {
	case allWaitBusy:
		wl.allWaitKeep(ci, wait, hold)
	case allWaitFirst:
		wl.allWaitSet(ci, wait, hold)
	default:
		return false
	}
	return true
}

// allWaitKeep is Q: allWaitBusy kept alive for hold. Its lock must stay trusted.
func (wl *workload) allWaitKeep(ci int, wait, hold time.Duration) {
	who := fmt.Sprintf("c%d/all-wait", ci)
	asked := time.Now()
	wl.acquires.Add(1)
	l, err := wl.clients[ci].Acquire(context.Background(), allWaitBusy, redlock.AcquireOptions{Wait: wait})
	if err != nil {
		wl.programError(who, err)
		return
	}
	wl.ops.Add(2)
	i := l.Info()
	h := &holder{l: l, client: ci, asked: asked, key: allWaitBusy, who: who, kind: kindExclusive, handed: i.Handed, attempts: i.Attempts}
	if wl.g.enter(h) {
		_ = l.KeepAlive(wl.p.ttl/4, 0)
		ctx, cancel := l.Context(context.Background())
		workFor(ctx, hold)
		cancel()
		if i := l.Info(); i.Err != nil {
			wl.g.violation("lapsed", "%s: its lock of %q, kept alive, was lost %v after it was taken (%v) while no fault ran: %s",
				who, allWaitBusy, time.Since(h.entered), i.Err, h)
		}
		wl.g.exit(h)
	}
	wl.g.released(h)
	_ = l.Release(context.Background())
}

// allWaitSet is P: AcquireAll of both keys, waiting for Q's. The lock of allWaitFirst it
// returns must be the one it took when the call began.
func (wl *workload) allWaitSet(ci int, wait, hold time.Duration) {
	who := fmt.Sprintf("c%d/all-wait-set", ci)
	asked := time.Now()
	wl.acquires.Add(1)
	locks, err := wl.clients[ci].AcquireAll(context.Background(), []string{allWaitFirst, allWaitBusy}, redlock.AcquireOptions{Wait: wait})
	if err != nil {
		wl.programError(who, err)
		return
	}
	wl.ops.Add(int64(2 * len(locks)))
	if i := locks[0].Info(); i.AcquiredAt.After(asked) {
		wl.g.violation("lapsed", "%s: AcquireAll returned a lock of %q taken %v after the call began: the one it took first was lost while it waited %v for %q, and no fault ran",
			who, i.Key, i.AcquiredAt.Sub(asked), time.Since(asked), allWaitBusy)
	}
	var all, holders []*holder
	for _, l := range locks {
		i := l.Info()
		h := &holder{l: l, client: ci, asked: asked, key: i.Key, who: who, kind: kindExclusive, set: true, handed: i.Handed, attempts: i.Attempts}
		all = append(all, h)
		if wl.g.enter(h) {
			holders = append(holders, h)
		}
	}
	time.Sleep(hold)
	for _, h := range holders {
		wl.g.exit(h)
	}
	for _, h := range all {
		wl.g.released(h)
		_ = h.l.Release(context.Background())
	}
}

// programError records an acquire error of a program that is none of the expected ones
// (busy, unavailable, cancelled), as holdOnce does.
func (wl *workload) programError(who string, err error) {
	var busy *redlock.BusyError
	var unav *redlock.UnavailableError
	if !errors.As(err, &busy) && !errors.As(err, &unav) && !errors.Is(err, context.Canceled) {
		wl.g.violation("error", "%s: acquire: %v", who, err)
	}
}
