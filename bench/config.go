package main

import (
	"flag"
	"time"
)

// config holds the run's sizes and durations (written to the JSON as "settings").
type config struct {
	LibRounds      int           `json:"lib_rounds"`
	LibDur         time.Duration `json:"lib_duration_ns"` // per variant per round
	Clients        int           `json:"clients"`
	Rounds         int           `json:"rounds"`
	HTTPDur        time.Duration `json:"http_duration_ns"`
	Warmup         time.Duration `json:"warmup_ns"`
	HotClients     int           `json:"hot_clients"`
	HotRounds      int           `json:"hot_rounds"`
	HotDur         time.Duration `json:"hot_duration_ns"`
	FaultyDur      time.Duration `json:"faulty_hot_duration_ns"` // hot key with a faulty node, per variant per round
	Hold           time.Duration `json:"hold_ns"`
	Waiters        int           `json:"waiters"`
	WaitKeys       int           `json:"wait_keys"`
	WaitMeasure    time.Duration `json:"wait_measure_ns"`
	Drain          time.Duration `json:"drain_limit_ns"`
	RedsyncWaiters bool          `json:"redsync_waiters"`
}

// full is `make bench` (about 6 minutes on 2 cores); quick is under 2 minutes.
var (
	full = config{LibRounds: 3, LibDur: time.Second, Clients: 16, Rounds: 2, HTTPDur: 3 * time.Second,
		Warmup: 500 * time.Millisecond, HotClients: 16, HotRounds: 2, HotDur: 5 * time.Second, FaultyDur: 3 * time.Second, Hold: 2 * time.Millisecond,
		Waiters: 10000, WaitKeys: 100, WaitMeasure: 4 * time.Second, Drain: 30 * time.Second, RedsyncWaiters: true}
	quick = config{LibRounds: 1, LibDur: 400 * time.Millisecond, Clients: 16, Rounds: 1, HTTPDur: 1500 * time.Millisecond,
		Warmup: 200 * time.Millisecond, HotClients: 16, HotRounds: 1, HotDur: 3 * time.Second, FaultyDur: 2 * time.Second, Hold: 2 * time.Millisecond,
		Waiters: 10000, WaitKeys: 100, WaitMeasure: 4 * time.Second, Drain: 20 * time.Second, RedsyncWaiters: false}
)

// flags are the command line; zero values keep the preset's.
type flags struct {
	quick    bool
	out, md  string
	caddy    string
	compare  string
	noRS     bool
	repo     string
	only     string
	profile  string
	keep     bool
	clients  int
	dur      time.Duration
	hotDur   time.Duration
	faulty   time.Duration
	waiters  int
	rsWaiter string
}

func parseFlags(args []string) (flags, config) {
	var f flags
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.BoolVar(&f.quick, "quick", false, "short run (under 2 minutes): one round, shorter windows")
	fs.StringVar(&f.out, "out", "results.json", "JSON results file")
	fs.StringVar(&f.md, "md", "results.md", "Markdown results file (empty: none)")
	fs.StringVar(&f.caddy, "caddy", "", "prebuilt Caddy binary with the plugin (default: go build ../cmd/caddy)")
	fs.StringVar(&f.compare, "compare", "", "a second Caddy build (e.g. of another commit): its redlock N=5 rows run alternated with the first's, named \""+nameCompare+"...\"")
	fs.BoolVar(&f.noRS, "no-redsync", false, "leave out the redsync variants of the proxy phases (quicker A/B runs with -compare)")
	fs.StringVar(&f.repo, "repo", "", "repository root (default: found from the working directory)")
	fs.StringVar(&f.only, "only", "", "comma-separated subset: floor,lock,hotlib,http,hot,faultyhot,waiters,modes,modemix,fencemem,seqcost")
	fs.StringVar(&f.profile, "profile", "", "directory for CPU profiles of Caddy (unique keys and hot key, after the measurements)")
	fs.BoolVar(&f.keep, "keep", false, "keep the temporary directory (logs, Caddyfiles)")
	fs.IntVar(&f.clients, "clients", 0, "concurrent clients for unique-key runs")
	fs.DurationVar(&f.dur, "dur", 0, "window per variant per round, unique keys")
	fs.DurationVar(&f.hotDur, "hot-dur", 0, "window per variant per round, hot key")
	fs.DurationVar(&f.faulty, "faulty-dur", 0, "window per variant per round, hot key with a faulty node (faultyhot)")
	fs.IntVar(&f.waiters, "waiters", 0, "waiting requests for the memory run")
	fs.StringVar(&f.rsWaiter, "redsync-waiters", "", "also queue the waiters on the redsync proxy: on|off (default: on, off with -quick)")
	fs.Parse(args)
	cfg := full
	if f.quick {
		cfg = quick
	}
	if f.clients > 0 {
		cfg.Clients = f.clients
	}
	if f.dur > 0 {
		cfg.HTTPDur = f.dur
	}
	if f.hotDur > 0 {
		cfg.HotDur = f.hotDur
	}
	if f.faulty > 0 {
		cfg.FaultyDur = f.faulty
	}
	if f.waiters > 0 {
		cfg.Waiters = f.waiters
	}
	switch f.rsWaiter {
	case "on":
		cfg.RedsyncWaiters = true
	case "off":
		cfg.RedsyncWaiters = false
	}
	return f, cfg
}
