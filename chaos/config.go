package main

import (
	"fmt"
	"time"
)

// config is one run's shape. Two presets: "short" (CI, a few minutes) and "full".
type config struct {
	mode      string
	instances int // Caddy processes
	nodes     int // redis-server processes
	proxied   []int
	clients   int // hot-key client loops
	streamers int // streaming client loops
	// modeClients are the client loops of the lock modes' routes (modes.go).
	modeClients int
	hotKeys     int
	holdMin     time.Duration // upstream hold of a hot-key request
	holdMax     time.Duration
	thinkMax    time.Duration // pause between a client's requests
	streamMin   time.Duration
	streamMax   time.Duration

	ttl         time.Duration
	wait        time.Duration
	nodeTimeout time.Duration
	altTimeout  time.Duration // the node_timeout reloads switch to (a new locker)

	steady     time.Duration // load before the first fault
	faultHold  time.Duration // how long a fault lasts (longer than the ttl)
	recoverMax time.Duration // a fault must be recovered from within this
	settle     time.Duration // load after recovery, before the next fault
	reloads    int
	rounds     int  // times the fault list runs (later rounds pick other nodes)
	extra      bool // the extra faults (restart cascade, more toxics)
	deadline   time.Duration
	slack      time.Duration // delivery slack on top of the ttl (cancellation over TCP)

	monitor bool // diagnostics: MONITOR every node into the work directory
	debug   bool // diagnostics: Caddy at DEBUG level
}

func preset(mode string) (config, error) {
	c := config{
		mode: mode, instances: 3, nodes: 5, proxied: []int{3, 4},
		hotKeys: 3, holdMin: 5 * time.Millisecond, holdMax: 25 * time.Millisecond, thinkMax: 30 * time.Millisecond,
		streamMin: time.Second, streamMax: 2 * time.Second,
		ttl: time.Second, wait: 3 * time.Second, nodeTimeout: 100 * time.Millisecond, altTimeout: 120 * time.Millisecond,
		slack: 500 * time.Millisecond,
	}
	switch mode {
	case "short":
		c.clients, c.streamers, c.modeClients = 24, 4, 8
		c.steady, c.faultHold, c.recoverMax, c.settle = 2*time.Second, 2500*time.Millisecond, 10*time.Second, time.Second
		c.reloads, c.rounds = 4, 1
		c.deadline = 4*time.Minute + 30*time.Second
	case "full":
		c.clients, c.streamers, c.modeClients, c.hotKeys = 48, 6, 12, 4
		c.steady, c.faultHold, c.recoverMax, c.settle = 4*time.Second, 4*time.Second, 20*time.Second, 2*time.Second
		c.reloads, c.rounds, c.extra = 8, 2, true
		c.deadline = 25 * time.Minute
	default:
		return c, fmt.Errorf("unknown mode %q (want short or full)", mode)
	}
	return c, nil
}

// staleSpan is how long after a pause of its instance a request may still arrive with a
// lapsed lock: it acquired before the pause and reaches the upstream just after it.
func (c config) staleSpan() time.Duration { return 2*c.ttl + c.slack }
