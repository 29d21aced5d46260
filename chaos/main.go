// Command chaos runs the real system under faults and hostile timing and checks that
// mutual exclusion and fencing hold: 3 cmd/caddy processes with the redlock handler in
// front of a checking upstream, 5 redis-server nodes (2 of them behind an in-process
// toxiproxy), many concurrent clients on a few hot keys plus streams, and one fault after
// another while the load runs. It prints one summary per fault and exits non-zero on any
// violation, token regression, unlocked request or failed check.
//
//	go -C chaos run .                # the short form (CI, a few minutes)
//	go -C chaos run . -mode full     # every fault twice on other nodes, extra faults
//
// See docs/chaos.md for what each fault checks.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

func main() {
	os.Exit(run())
}

func run() int {
	mode := flag.String("mode", "short", "short (CI) or full")
	repo := flag.String("repo", "..", "the caddy-redlock checkout (cmd/caddy is built from it)")
	race := flag.Bool("race", false, "build cmd/caddy with the race detector")
	keep := flag.Bool("keep", false, "keep the work directory (Caddy logs, Caddyfiles) even when all passes")
	only := flag.String("only", "", "comma-separated fault numbers to run (e.g. 1,5); default all")
	mon := flag.Bool("monitor", false, "diagnostics: record every node's MONITOR stream in the work directory")
	debug := flag.Bool("debug", false, "diagnostics: Caddy logs at DEBUG level")
	flag.Parse()

	cfg, err := preset(*mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	cfg.monitor, cfg.debug = *mon, *debug
	began := time.Now()
	logf := func(format string, args ...any) {
		fmt.Printf("[%6.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.deadline)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			fmt.Fprintln(os.Stderr, "chaos: interrupted, cleaning up")
			cancel()
		}
	}()

	work, err := os.MkdirTemp("", "caddy-redlock-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	failed := true
	defer func() {
		if failed || *keep {
			fmt.Printf("work directory (Caddy logs and Caddyfiles): %s\n", work)
			return
		}
		os.RemoveAll(work)
	}()

	logf("mode %s: %d Caddy instances, %d nodes (%v behind toxiproxy), %d clients on %d hot keys, %d streams; ttl %v, wait %v, node_timeout %v",
		cfg.mode, cfg.instances, cfg.nodes, cfg.proxied, cfg.clients, cfg.hotKeys, cfg.streamers, cfg.ttl, cfg.wait, cfg.nodeTimeout)
	abs, _ := filepath.Abs(*repo)
	logf("building cmd/caddy from %s", abs)
	bin, err := buildCaddy(*repo, work, *race)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}

	summaries, final, err := runSuite(ctx, cfg, bin, work, *only, logf)
	childproc.StopAll(5 * time.Second) // a safety net: runSuite stops its processes itself
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	printTable(os.Stdout, summaries)
	bad := 0
	for _, s := range summaries {
		if !s.ok() {
			bad++
		}
	}
	for _, f := range final {
		fmt.Printf("FAIL: %s\n", f)
	}
	took := time.Since(began).Round(time.Second)
	if bad > 0 || len(final) > 0 {
		fmt.Printf("\nchaos %s: FAIL (%d of %d faults failed, %d final checks failed) in %v\n", cfg.mode, bad, len(summaries), len(final), took)
		return 1
	}
	failed = false
	fmt.Printf("\nchaos %s: PASS: %d faults, no violation, no token regression, nothing proxied unlocked, in %v\n", cfg.mode, len(summaries), took)
	return 0
}

// faultList is the fault sequence for one round (later rounds use other nodes).
func faultList(cfg config, round int) []fault {
	n := cfg.nodes
	at := func(i int) int { return (i + 3*round) % n }
	fs := []fault{
		pauseNodeFault(at(0)),
		killRestartFault(at(1)),
	}
	if cfg.extra {
		fs = append(fs, restartCascadeFault(at(2), at(3), at(4)))
	}
	fs = append(fs,
		killTwoFault(at(2), at(3)),
		noQuorumFault(at(0), at(1), at(4)),
		pauseCaddyFault(round%cfg.instances),
		netFault(netSteps(cfg)),
		reloadFault(cfg.reloads),
		clientsGoneFault(2),
	)
	return fs
}

// selected reports whether a fault's number is in only ("" selects all).
func selected(only, name string) bool {
	if only == "" {
		return true
	}
	num, _, _ := strings.Cut(name, " ")
	for _, o := range strings.Split(only, ",") {
		if strings.TrimSpace(o) == num {
			return true
		}
	}
	return false
}
