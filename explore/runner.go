package main

// The loop: cases drawn from consecutive seeds, run in batches, until the time is up;
// then the summary line.

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
)

type options struct {
	d       time.Duration
	seed    uint64 // a replay: this case alone
	replay  int    // times to run a replayed seed
	first   uint64
	batch   int
	verbose bool
	show    bool // EXPLORE_SHOW=1: every case's report, violations or not
	stop    bool // EXPLORE_STOP=1: end after the first batch with a violation (the revert table)
}

func optionsFromEnv() options {
	o := options{d: 5 * time.Minute, batch: maxBatch, replay: 1, first: uint64(time.Now().UnixNano()/1000) % 1_000_000_000}
	if v := os.Getenv("EXPLORE_TIME"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			o.d = d
		}
	}
	if v := os.Getenv("EXPLORE_SEED"); v != "" {
		o.seed, _ = strconv.ParseUint(v, 10, 64)
		o.batch = 1
	}
	if v := os.Getenv("EXPLORE_REPLAY"); v != "" {
		o.replay, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("EXPLORE_FIRST"); v != "" {
		o.first, _ = strconv.ParseUint(v, 10, 64)
	}
	if v := os.Getenv("EXPLORE_BATCH"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= maxBatch {
			o.batch = n
		}
	}
	o.verbose = os.Getenv("EXPLORE_VERBOSE") != ""
	o.stop = os.Getenv("EXPLORE_STOP") == "1"
	o.show = os.Getenv("EXPLORE_SHOW") == "1"
	avoid := strings.Split(os.Getenv("EXPLORE_AVOID"), ",") // e.g. issue38,issue39
	avoidIssue38 = slices.Contains(avoid, "issue38")
	avoidIssue39 = slices.Contains(avoid, "issue39")
	return o
}

// run runs the explorer and returns the exit code.
func run(out io.Writer, o options) int {
	w, err := newWorld()
	if err != nil {
		fmt.Fprintln(out, "explore:", err)
		return 2
	}
	start := time.Now()
	var cases, violations, errs, batches int
	var failed []uint64
	var firstErr string
	var firstFound time.Duration
	shapeCount := map[string]int{}
	generation := 0
	next := o.first
	seeds := func() []*caseSpec {
		if o.seed != 0 {
			// A refused config counts as a run too: a replay of it must end.
			if cases+errs >= o.replay {
				return nil
			}
			return []*caseSpec{generate(o.seed)}
		}
		if time.Since(start) >= o.d || (o.stop && len(failed) > 0) {
			return nil
		}
		var b []*caseSpec
		global := false
		for len(b) < o.batch {
			c := generate(next)
			if globalEnding(c.ending) && global {
				break
			}
			global = global || globalEnding(c.ending)
			b = append(b, c)
			next++
		}
		return b
	}
	for batch := seeds(); batch != nil; batch = seeds() {
		batches++
		for _, r := range w.runBatch(batch, &generation) {
			if r.err != nil {
				errs++
				if firstErr == "" {
					firstErr = fmt.Sprintf("seed %d: %v\n%s", r.c.seed, r.err, r.caddyfile)
				}
				continue
			}
			cases++
			shapeCount[r.c.shape]++
			if o.verbose {
				fmt.Fprintf(out, "case %d %s/%s/%s/%s: %d violations\n", r.c.seed, r.c.shape, r.c.ending, r.c.lock.mode, r.c.mix, len(r.v.violations))
			}
			if len(r.v.violations) > 0 {
				violations += len(r.v.violations)
				if len(failed) == 0 {
					firstFound = time.Since(start)
				}
				failed = append(failed, r.c.seed)
				r.report(out)
			} else if o.show {
				r.report(out)
			}
		}
	}
	w.close()
	leak := ""
	if !waitFor(5*time.Second, func() bool { return rootGoroutines() == 0 }) {
		leak = fmt.Sprintf(" leaked_goroutines=%d", rootGoroutines())
		violations++
	}
	_ = caddy.Stop()
	elapsed := time.Since(start)
	if firstErr != "" {
		fmt.Fprintf(out, "explore: %d cases could not run; the first:\n%s\n", errs, firstErr)
	}
	var fs []string
	for _, s := range failed {
		fs = append(fs, strconv.FormatUint(s, 10))
	}
	found := ""
	if len(failed) > 0 {
		found = fmt.Sprintf(" first_failure_after=%s", firstFound.Round(time.Second))
	}
	fmt.Fprintf(out, "EXPLORE cases=%d violations=%d failed_seeds=%d batches=%d config_errors=%d first_seed=%d failed=[%s]%s%s real=%s cases_per_minute=%.0f\n",
		cases, violations, len(failed), batches, errs, o.first, strings.Join(fs, ","), found, leak, elapsed.Round(time.Second),
		float64(cases)/elapsed.Minutes())
	if violations > 0 || errs > 0 {
		return 1
	}
	return 0
}
