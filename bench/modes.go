package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The lock modes phase (-only modes): one hot key through two Caddy instances on the 5
// nodes, against its own mode-aware upstream (readers may overlap; a writer never
// overlaps anyone; a limited key's holders are counted in flight).
//
//   - shared reads: GETs of one key through Caddy+redlock `shared GET`, against the same
//     GETs through the same Caddy with no lock, alternating windows in one run: readers
//     must not serialize (target ≥ 0.8×);
//   - the same shared site with writes (PUT) mixed in: they run alone (overlaps must be 0);
//   - `limit 4`: the upstream's in flight for the key stays ≤ 4 and reaches 4.
//
// redsync has no shared or limited lock: its row says so.

// modeRow is one row of the phase.
type modeRow struct {
	Name         string        `json:"name"`
	RPS          float64       `json:"rps"`
	Ratio        float64       `json:"vs_no_lock,omitempty"` // shared reads over the no-lock reads
	Lat          latency       `json:"latency"`
	Writes       int           `json:"writes,omitempty"`
	Overlaps     int64         `json:"overlaps"` // a writer with anyone inside, a reader with a writer
	MaxInFlight  int           `json:"max_in_flight,omitempty"`
	MeanInFlight float64       `json:"mean_in_flight,omitempty"`
	Errors       int           `json:"errors"`
	Hold         time.Duration `json:"hold"`
	Note         string        `json:"note,omitempty"`
}

// modesHold is the upstream's hold per request: a read of a few milliseconds.
const modesHold = 5 * time.Millisecond

func runModes(res *results, cfg config, dir, caddyBin string, nodes []*redisNode, fail func(string, error)) {
	if caddyBin == "" {
		return
	}
	progress("5. lock modes...\n")
	bg := newBGMeter()
	defer noteBackground(res, "5. lock modes", bg)
	mu, err := startModeUpstream()
	if err != nil {
		fail("modes upstream", err)
		return
	}
	defer mu.close()
	wait := 30 * time.Second
	sites := []caddySite{{name: "plain", modeHeaders: true},
		{name: "shared", redis: urls(nodes), wait: wait, opts: "\t\tshared GET HEAD\n", modeHeaders: true},
		{name: "limit", redis: urls(nodes), wait: wait, opts: "\t\tlimit 4\n", modeHeaders: true}}
	var fes []*frontend
	for _, name := range []string{"caddy-modes-a", "caddy-modes-b"} {
		fe, err := startCaddy(caddyBin, dir, name, mu.addr, sites)
		if err != nil {
			fail("modes front end", err)
			return
		}
		defer fe.stop()
		fes = append(fes, fe)
	}
	conns := cfg.HotClients
	targets := func(site string) []*httpTarget {
		var ts []*httpTarget
		for _, fe := range fes {
			ts = append(ts, newTarget(fe.name+"/"+site, fe.sites[site], conns))
		}
		return ts
	}
	plain, shared, limited := targets("plain"), targets("shared"), targets("limit")
	read := func(int, int) string { return "/r/doc?hold=" + modesHold.String() }
	window := cfg.HotDur
	var noLock, reads loadResult
	alternate(cfg.HotRounds, 2, func(i, _ int) {
		if i == 0 {
			noLock.merge(runLoad(loadSpec{Clients: conns, Duration: window, Targets: plain, Path: read}))
		} else {
			reads.merge(runLoad(loadSpec{Clients: conns, Duration: window, Targets: shared, Path: read}))
		}
	})
	ratio := 0.0
	if noLock.rps() > 0 {
		ratio = reads.rps() / noLock.rps()
	}
	res.Modes = append(res.Modes,
		modeRow{Name: "GET, no lock (same Caddy)", RPS: noLock.rps(), Lat: summarize(noLock.Lat), Errors: noLock.errors(), Hold: modesHold},
		modeRow{Name: "GET, redlock shared GET HEAD", RPS: reads.rps(), Ratio: ratio, Lat: summarize(reads.Lat),
			Errors: reads.errors(), Overlaps: mu.overlaps.Load(), Hold: modesHold})

	// Writes among the reads: the readers go on, each write runs alone.
	mu.overlaps.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), window+10*time.Second)
	var writes atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			c := &http.Client{}
			end := time.Now().Add(window)
			for time.Now().Before(end) && ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "PUT", fes[w%len(fes)].sites["shared"]+"/r/doc?hold="+modesHold.String(), nil)
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						writes.Add(1)
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	mixed := runLoad(loadSpec{Clients: conns, Duration: window, Targets: shared, Path: read})
	wg.Wait()
	cancel()
	res.Modes = append(res.Modes, modeRow{Name: "GET shared + PUT writers (2 loops)", RPS: mixed.rps(), Lat: summarize(mixed.Lat),
		Writes: int(writes.Load()), Overlaps: mu.overlaps.Load(), Errors: mixed.errors(), Hold: modesHold})

	// limit 4 on one key, 4x as many clients.
	mu.resetInFlight()
	lim := runLoad(loadSpec{Clients: conns, Duration: window, Targets: limited,
		Path: func(int, int) string { return "/r/pool?hold=" + (2 * modesHold).String() }})
	most, mean := mu.inFlightStats()
	res.Modes = append(res.Modes,
		modeRow{Name: "redlock limit 4", RPS: lim.rps(), Lat: summarize(lim.Lat), MaxInFlight: most, MeanInFlight: mean,
			Errors: lim.errors(), Overlaps: mu.overlaps.Load(), Hold: 2 * modesHold},
		modeRow{Name: nameRedsync, Note: "no shared (reader-writer) or limited lock: nothing comparable to measure"})
	for _, ts := range [][]*httpTarget{plain, shared, limited} {
		for _, t := range ts {
			t.close()
		}
	}
}

// modeUpstream judges modes per key (X-Lock-Key, X-Lock-Mode) and counts the limited
// key's holders in flight, time-weighted.
type modeUpstream struct {
	srv      *http.Server
	addr     string
	overlaps atomic.Int64

	mu       sync.Mutex
	readers  map[string]int
	writers  map[string]int
	limited  int
	most     int
	area     time.Duration // sum over time of holders in flight × time
	since    time.Time     // the measure started
	lastMove time.Time
}

func startModeUpstream() (*modeUpstream, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &modeUpstream{addr: l.Addr().String(), readers: map[string]int{}, writers: map[string]int{}}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: time.Minute}
	go u.srv.Serve(l)
	return u, nil
}

func (u *modeUpstream) close() { u.srv.Close() }

func (u *modeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, mode := r.Header.Get("X-Lock-Key"), r.Header.Get("X-Lock-Mode")
	if strings.HasPrefix(key, "{") {
		key, mode = "", "" // the no-lock site: Caddy leaves the placeholder as text
	}
	u.enter(key, mode)
	defer u.leave(key, mode)
	if d, err := time.ParseDuration(r.URL.Query().Get("hold")); err == nil && d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	w.Write([]byte("ok\n"))
}

func (u *modeUpstream) enter(key, mode string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch mode {
	case "shared":
		if u.writers[key] > 0 {
			u.overlaps.Add(1)
		}
		u.readers[key]++
	case "limit":
		u.moveLocked(1)
		if u.limited > 4 {
			u.overlaps.Add(1)
		}
	case "exclusive":
		if u.writers[key]+u.readers[key] > 0 {
			u.overlaps.Add(1)
		}
		u.writers[key]++
	}
}

func (u *modeUpstream) leave(key, mode string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch mode {
	case "shared":
		u.readers[key]--
	case "limit":
		u.moveLocked(-1)
	case "exclusive":
		u.writers[key]--
	}
}

// moveLocked changes the limited key's holders in flight by d, integrating over time.
func (u *modeUpstream) moveLocked(d int) {
	now := time.Now()
	if !u.lastMove.IsZero() {
		u.area += time.Duration(u.limited) * now.Sub(u.lastMove)
	}
	u.lastMove = now
	u.limited += d
	u.most = max(u.most, u.limited)
}

func (u *modeUpstream) resetInFlight() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.most, u.area, u.since, u.lastMove = 0, 0, time.Now(), time.Time{}
}

// inFlightStats returns the most limited holders in flight at once and their mean since
// resetInFlight.
func (u *modeUpstream) inFlightStats() (most int, mean float64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.moveLocked(0)
	if span := time.Since(u.since); span > 0 {
		mean = float64(u.area) / float64(span)
	}
	return u.most, mean
}

// modesTable renders the phase.
func (r *results) modesTable() *table {
	t := &table{title: fmt.Sprintf("5. Lock modes: one hot key through 2 Caddy instances, N=5, %d clients", r.Settings.HotClients),
		head: []string{"front end", "req/s", "vs no lock", "p50", "p99", "writes", "overlaps", "in flight max/mean", "errors", "note"},
		notes: []string{"The upstream holds each read " + modesHold.String() + " (limit rows " + (2 * modesHold).String() +
			"); overlaps: a writer with anyone inside, or a reader with a writer (must be 0).",
			"vs no lock: shared reads over the same GETs through the same Caddy without redlock, alternating windows."}}
	for _, x := range r.Modes {
		ratio, inflight := "", ""
		if x.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f×", x.Ratio)
		}
		if x.MaxInFlight > 0 {
			inflight = fmt.Sprintf("%d / %.2f", x.MaxInFlight, x.MeanInFlight)
		}
		rps := ""
		if x.RPS > 0 {
			rps = fmt.Sprintf("%.0f", x.RPS)
		}
		t.add(x.Name, rps, ratio, fus(x.Lat.P50), fus(x.Lat.P99), fmt.Sprint(x.Writes), fmt.Sprint(x.Overlaps), inflight,
			fmt.Sprint(x.Errors), x.Note)
	}
	return t
}
