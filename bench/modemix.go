package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The mixed lock modes phase (-only modemix, issue 26): shared reads against exclusive
// reads with writes mixed in, as users measured it. Two Caddy instances on the 5 nodes,
// ttl 2s, wait 10s, fencing; 32 clients on 4 keys, 80% GET and 20% POST, the upstream
// holding each request 20 ms, node 5 paused (SIGSTOP) for 3 s in the middle of every
// window. Variant A: `shared GET HEAD` (GETs are readers); variant B: the same without
// `shared` (GETs exclusive). Alternated; the upstream judges overlaps. The ideal
// phase-fair reader-writer lock gives about 2.5x B's GET rate here (a 20 ms write, then a
// 20 ms batch of every waiting reader); the target is >= 2x, with 0 overlaps and no
// writer starved (every POST answered 2xx within the wait). With -compare, the second
// build runs the same two variants on its own two instances, alternated with the first's
// (rows "B: ...", not checked against the targets; its ratio is against its own exclusive
// GETs).

// mixRow is one variant of the phase.
type mixRow struct {
	Name     string        `json:"name"`
	GetRPS   float64       `json:"get_rps"`
	PostRPS  float64       `json:"post_rps"`
	Ratio    float64       `json:"get_vs_exclusive,omitempty"` // shared GETs over exclusive GETs
	GetLat   latency       `json:"get_latency"`
	PostLat  latency       `json:"post_latency"`
	Overlaps int64         `json:"overlaps"`
	Errors   int           `json:"errors"` // non-2xx or transport errors (a starved writer gets 503 after the wait)
	Window   time.Duration `json:"window"`
}

const (
	mixHold    = 20 * time.Millisecond
	mixClients = 32
	mixKeys    = 4
	mixPause   = 3 * time.Second
)

func runModeMix(res *results, cfg config, dir, caddyBin, compareBin string, nodes []*redisNode, fail func(string, error)) {
	if caddyBin == "" {
		return
	}
	progress("5b. lock modes, reads and writes mixed...\n")
	bg := newBGMeter()
	defer noteBackground(res, "5b. lock modes mixed", bg)
	mu, err := startModeUpstream()
	if err != nil {
		fail("modemix upstream", err)
		return
	}
	defer mu.close()
	opts := "\t\tfencing\n"
	sites := []caddySite{
		{name: "shared", redis: urls(nodes), wait: 10 * time.Second, ttl: 2 * time.Second, opts: opts + "\t\tshared GET HEAD\n", modeHeaders: true},
		{name: "exclusive", redis: urls(nodes), wait: 10 * time.Second, ttl: 2 * time.Second, opts: opts, modeHeaders: true}}
	bins := []string{caddyBin}
	if compareBin != "" {
		bins = append(bins, compareBin)
	}
	// fes[b] are build b's two instances.
	fes := make([][]*frontend, len(bins))
	for b, bin := range bins {
		for _, name := range []string{"caddy-mix-a", "caddy-mix-b"} {
			if b > 0 {
				name = strings.Replace(name, "mix", "mixcmp", 1)
			}
			fe, err := startCaddy(bin, dir, name, mu.addr, sites)
			if err != nil {
				fail("modemix front end", err)
				return
			}
			defer fe.stop()
			fes[b] = append(fes[b], fe)
		}
	}
	window := max(2*cfg.HotDur, mixPause+3*time.Second)
	names := []string{"shared", "exclusive"}
	got := make([]mixResult, 2*len(bins)) // build b's shared at 2b, exclusive at 2b+1
	alternate(cfg.HotRounds, len(got), func(i, _ int) {
		mu.overlaps.Store(0)
		var bases []string
		for _, fe := range fes[i/2] {
			bases = append(bases, fe.sites[names[i%2]])
		}
		r := runMix(bases, window, nodes[len(nodes)-1])
		r.overlaps = mu.overlaps.Load()
		got[i].merge(r)
	})
	for b := range bins {
		prefix := ""
		if b > 0 {
			prefix = nameCompare
		}
		ex := got[2*b+1].getRPS()
		for k, label := range []string{"GET shared (`shared GET HEAD`), POST exclusive", "GET exclusive, POST exclusive"} {
			g := &got[2*b+k]
			row := mixRow{Name: prefix + label, GetRPS: g.getRPS(), PostRPS: g.postRPS(), GetLat: summarize(g.getLat), PostLat: summarize(g.postLat),
				Overlaps: g.overlaps, Errors: g.errors, Window: g.window}
			if k == 0 && ex > 0 {
				row.Ratio = row.GetRPS / ex
			}
			res.ModeMix = append(res.ModeMix, row)
		}
	}
}

// mixResult is what one or more windows of the mixed load saw.
type mixResult struct {
	window          time.Duration
	gets, posts     int // 2xx completed inside the window
	getLat, postLat []time.Duration
	errors          int
	overlaps        int64
}

func (m *mixResult) merge(o mixResult) {
	m.window += o.window
	m.gets += o.gets
	m.posts += o.posts
	m.getLat = append(m.getLat, o.getLat...)
	m.postLat = append(m.postLat, o.postLat...)
	m.errors += o.errors
	m.overlaps += o.overlaps
}

func (m *mixResult) getRPS() float64  { return float64(m.gets) / max(m.window.Seconds(), 1e-9) }
func (m *mixResult) postRPS() float64 { return float64(m.posts) / max(m.window.Seconds(), 1e-9) }

// runMix runs the mixed load on the front ends for window, pausing node for mixPause from
// a quarter of the window on (always resumed before it returns).
func runMix(bases []string, window time.Duration, node *redisNode) mixResult {
	tr := &http.Transport{MaxIdleConns: mixClients, MaxIdleConnsPerHost: mixClients, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	start := time.Now()
	end := start.Add(window)
	ctx, cancel := context.WithTimeout(context.Background(), window+20*time.Second)
	defer cancel()
	var mu sync.Mutex
	r := mixResult{window: window}
	var wg sync.WaitGroup
	for c := range mixClients {
		wg.Go(func() {
			base := bases[c%len(bases)]
			rng := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			for time.Now().Before(end) && ctx.Err() == nil {
				method := http.MethodGet
				if rng.IntN(5) == 0 {
					method = http.MethodPost
				}
				url := fmt.Sprintf("%s/r/mix%d?hold=%s", base, rng.IntN(mixKeys), mixHold)
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(ctx, method, url, nil)
				ok := false
				if resp, err := hc.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ok = resp.StatusCode/100 == 2
				}
				done := time.Now()
				mu.Lock()
				switch {
				case !ok:
					r.errors++
				case method == http.MethodGet:
					r.getLat = append(r.getLat, done.Sub(t0))
					if done.Before(end) {
						r.gets++
					}
				default:
					r.postLat = append(r.postLat, done.Sub(t0))
					if done.Before(end) {
						r.posts++
					}
				}
				mu.Unlock()
			}
		})
	}
	// The pause, in the middle of the window; resumed whatever happens.
	t := time.NewTimer(window / 4)
	select {
	case <-t.C:
		if err := node.proc.Signal(syscall.SIGSTOP); err != nil {
			notef("modemix: pause node: %v", err)
		} else {
			time.Sleep(mixPause)
			if err := node.proc.Signal(syscall.SIGCONT); err != nil {
				notef("modemix: resume node: %v", err)
			}
		}
	case <-ctx.Done():
		t.Stop()
	}
	wg.Wait()
	return r
}

// modeMixTable renders the phase.
func (r *results) modeMixTable() *table {
	t := &table{title: fmt.Sprintf("5b. Lock modes, mixed: %d clients on %d keys through 2 Caddy instances, N=5, 80%% GET / 20%% POST, ttl 2s, wait 10s, fencing",
		mixClients, mixKeys),
		head: []string{"variant", "GET/s", "vs exclusive GETs", "POST/s", "GET p50", "GET p99", "POST p50", "POST p99", "POST max", "overlaps", "errors"},
		notes: []string{"The upstream holds every request " + mixHold.String() + "; node 5 is paused (SIGSTOP) for " + mixPause.String() +
			" in each window. Overlaps: a writer with anyone inside, or a reader with a writer (must be 0).",
			"Ideal phase-fair reader-writer lock: about 2.5× the exclusive GET rate (a write, then a batch of every waiting reader)."}}
	for _, x := range r.ModeMix {
		ratio := ""
		if x.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f×", x.Ratio)
		}
		t.add(x.Name, fmt.Sprintf("%.0f", x.GetRPS), ratio, fmt.Sprintf("%.0f", x.PostRPS), fus(x.GetLat.P50), fus(x.GetLat.P99),
			fus(x.PostLat.P50), fus(x.PostLat.P99), fus(x.PostLat.Max), fmt.Sprint(x.Overlaps), fmt.Sprint(x.Errors))
	}
	return t
}

// checkMixTargets adds issue 26's targets for the mixed modes and the fencing state.
func (r *results) checkMixTargets(add func(target, value string, met *bool), yes func(bool) *bool) {
	if len(r.ModeMix) >= 2 { // the first build's two rows (a -compare build's follow)
		s, e := r.ModeMix[0], r.ModeMix[1]
		add("mixed reads/writes: shared GETs ≥ 2× exclusive GETs (ideal ≈ 2.5×)",
			fmt.Sprintf("%.2f× (%.0f vs %.0f GET/s)", s.Ratio, s.GetRPS, e.GetRPS), yes(s.Ratio >= 2))
		add("mixed reads/writes: no overlap, no writer starved (every POST 2xx within the wait)",
			fmt.Sprintf("%d overlaps, %d errors, %d POSTs, POST max %s", s.Overlaps+e.Overlaps, s.Errors+e.Errors, s.PostLat.N, fus(s.PostLat.Max)),
			yes(s.Overlaps+e.Overlaps == 0 && s.Errors+e.Errors == 0 && s.PostLat.N > 0))
	}
	for _, f := range r.FenceMem {
		add("fencing state per node back to idle within 2 quarantines + 10s after unique-key load",
			fmt.Sprintf("%.1fs (bound %.1fs); %d keys / %s at the end of the run, max per node",
				f.DrainSeconds, f.BoundSeconds, f.KeysAfterRun, fbytes(float64(f.MemAfterRun-f.MemIdle))),
			yes(f.Drained && f.DrainSeconds <= f.BoundSeconds))
	}
}
