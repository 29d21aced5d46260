package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// formatStatuses renders status counts as "200:1203 423:12 503:40 err:2".
func formatStatuses(m map[int]int) string {
	var parts []string
	for _, k := range sortedStatuses(m) {
		name := fmt.Sprint(k)
		if k == 0 {
			name = "err"
		}
		parts = append(parts, fmt.Sprintf("%s:%d", name, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func (s summary) recoveryText() string {
	switch {
	case !s.measured:
		return "-"
	case !s.recovered:
		return "NONE"
	default:
		return s.recovery.Round(time.Millisecond).String()
	}
}

// printSummary prints one fault's block, as soon as the fault is done.
func printSummary(w io.Writer, s summary) {
	verdict := "ok"
	if !s.ok() {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\n== %s [%s] (%v)\n", s.name, verdict, s.duration.Round(100*time.Millisecond))
	fmt.Fprintf(w, "   requests %d (streams %d, %d complete): %s; hot-key 200s p50 %v p99 %v\n", s.requests, s.streams, s.streamsFull,
		formatStatuses(s.statuses), s.p50.Round(time.Millisecond), s.p99.Round(time.Millisecond))
	fmt.Fprintf(w, "   violations %d, token regressions %d, unlocked %d, stale rejected by fencing %d (overlaps with a paused holder %d), cancelled mid-stream %d, locks lost %d\n",
		s.c.Violations, s.c.Regressions, s.c.Unlocked, s.c.StaleRejected, s.c.StaleOverlaps, s.c.Cancelled, s.lost)
	fmt.Fprintf(w, "   time to recover: %s\n", s.recoveryText())
	for _, n := range s.notes {
		fmt.Fprintf(w, "   - %s\n", n)
	}
	for _, f := range s.failures {
		fmt.Fprintf(w, "   FAIL: %s\n", f)
	}
}

// printTable prints all faults side by side.
func printTable(w io.Writer, ss []summary) {
	fmt.Fprintf(w, "\n%-44s %7s %6s %5s %5s %5s %5s %5s %5s %6s %6s %9s\n",
		"fault", "reqs", "200", "423", "503", "other", "viol", "regr", "unlck", "stale", "cancel", "recover")
	var t summary
	t.statuses = map[int]int{}
	for _, s := range ss {
		other := s.requests - s.statuses[200] - s.statuses[423] - s.statuses[503]
		fmt.Fprintf(w, "%-44s %7d %6d %5d %5d %5d %5d %5d %5d %6d %6d %9s\n", trunc(s.name, 44), s.requests,
			s.statuses[200], s.statuses[423], s.statuses[503], other, s.c.Violations, s.c.Regressions, s.c.Unlocked,
			s.c.StaleRejected, s.c.Cancelled, s.recoveryText())
		t.requests += s.requests
		for k, v := range s.statuses {
			t.statuses[k] += v
		}
		t.c.Violations += s.c.Violations
		t.c.Regressions += s.c.Regressions
		t.c.Unlocked += s.c.Unlocked
		t.c.StaleRejected += s.c.StaleRejected
		t.c.Cancelled += s.c.Cancelled
	}
	other := t.requests - t.statuses[200] - t.statuses[423] - t.statuses[503]
	fmt.Fprintf(w, "%-44s %7d %6d %5d %5d %5d %5d %5d %5d %6d %6d\n", "total", t.requests,
		t.statuses[200], t.statuses[423], t.statuses[503], other, t.c.Violations, t.c.Regressions, t.c.Unlocked,
		t.c.StaleRejected, t.c.Cancelled)
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "~"
}
