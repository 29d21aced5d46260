package main

import (
	"slices"
	"sort"
	"sync"
	"time"
)

// result is one client request as the client saw it.
type result struct {
	start, end time.Time
	key        string // hot0, st1, ...
	hot        bool   // a hot-key request (recovery is measured on these)
	stream     bool
	route      string // a lock-mode request: modeRoute's name; "" otherwise
	inst       int
	status     int  // 0: no response (connection error, timeout)
	complete   bool // a stream that ended with "done"
}

// recorder keeps every result; phases are cut out of it by start time.
type recorder struct {
	mu  sync.Mutex
	all []result
}

func (r *recorder) add(res result) {
	r.mu.Lock()
	r.all = append(r.all, res)
	r.mu.Unlock()
}

// between returns the results of requests started in [from, to).
func (r *recorder) between(from, to time.Time) []result {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []result
	for _, x := range r.all {
		if !x.start.Before(from) && x.start.Before(to) {
			out = append(out, x)
		}
	}
	return out
}

// recovered reports when every hot key had a successful request started at or after t:
// the latest of those keys' first successes (by end time), and whether all had one.
func (r *recorder) recovered(t time.Time, hotKeys []string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := map[string]time.Time{}
	for _, x := range r.all {
		if !x.hot || x.status != 200 || x.start.Before(t) {
			continue
		}
		if f, ok := first[x.key]; !ok || x.end.Before(f) {
			first[x.key] = x.end
		}
	}
	var latest time.Time
	for _, k := range hotKeys {
		f, ok := first[k]
		if !ok {
			return time.Time{}, false
		}
		if f.After(latest) {
			latest = f
		}
	}
	return latest, true
}

// statusCounts counts results per status (0 = no response).
func statusCounts(rs []result) map[int]int {
	m := map[int]int{}
	for _, x := range rs {
		m[x.status]++
	}
	return m
}

// latencies returns the sorted durations of the results that pass keep.
func latencies(rs []result, keep func(result) bool) []time.Duration {
	var ds []time.Duration
	for _, x := range rs {
		if keep(x) {
			ds = append(ds, x.end.Sub(x.start))
		}
	}
	slices.Sort(ds)
	return ds
}

// pct returns the p-th percentile (0..100) of sorted durations, or 0.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(float64(len(ds)-1) * p / 100)
	return ds[i]
}

// sortedStatuses lists the statuses of m in ascending order, 0 last.
func sortedStatuses(m map[int]int) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if (ks[i] == 0) != (ks[j] == 0) {
			return ks[j] == 0
		}
		return ks[i] < ks[j]
	})
	return ks
}
