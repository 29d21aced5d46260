package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// upstream is the demo origin behind every proxy. GET /r/{id}?hold=D sleeps D (or, with
// hold=gate, until the bench opens the gate) while it counts concurrent entries per id.
// Two requests for one id inside it at once is a mutual-exclusion VIOLATION.
//
// During hot-key runs it also records the order in which requests entered, with the
// client's send time (header X-Bench-Sent) and instance (X-Bench-Inst), to measure how far
// each instance's waiters are served out of arrival order.
type upstream struct {
	srv  *http.Server
	addr string

	mu         sync.Mutex
	active     map[string][]inside
	violations int64
	violLog    []string
	gate       chan struct{}
	keySeen    map[string]keyHistory
	recording  bool
	entries    []entry
	busy       time.Duration // total time spent holding, summed over requests

	seq      atomic.Int64
	served   atomic.Int64
	inFlight atomic.Int64
}

// keyHistory says when a key was first seen and how often, for violation reports.
type keyHistory struct {
	first time.Time
	n     int
}

// inside is a request currently in the upstream, for violation reports.
type inside struct {
	id   int64
	inst string
	at   time.Time
}

// entry is one request as it entered the upstream (hot-key order analysis).
type entry struct {
	inst int
	sent time.Duration // client's send time, since bench start
}

func startUpstream() (*upstream, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{addr: l.Addr().String(), active: map[string][]inside{}, keySeen: map[string]keyHistory{}, gate: make(chan struct{})}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: time.Minute}
	go u.srv.Serve(l)
	return u, nil
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, ok := strings.CutPrefix(r.URL.Path, "/r/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	hold := r.URL.Query().Get("hold")
	u.inFlight.Add(1)
	defer u.inFlight.Add(-1)

	me := inside{id: u.seq.Add(1), inst: r.Header.Get("X-Bench-Inst"), at: time.Now()}
	u.mu.Lock()
	h, ok := u.keySeen[key]
	if !ok {
		h.first = me.at
	}
	h.n++
	u.keySeen[key] = h
	if others := u.active[key]; len(others) > 0 {
		u.violations++
		if len(u.violLog) < 10 {
			o := others[0]
			u.violLog = append(u.violLog, fmt.Sprintf("key %q: request #%d (instance %s) entered while #%d (instance %s) had been inside for %v (request %d for this key, %v after its first)",
				key, me.id, me.inst, o.id, o.inst, me.at.Sub(o.at).Round(time.Microsecond), h.n, me.at.Sub(h.first).Round(time.Millisecond)))
		}
	}
	u.active[key] = append(u.active[key], me)
	if u.recording {
		sent, _ := strconv.ParseInt(r.Header.Get("X-Bench-Sent"), 10, 64)
		inst, _ := strconv.Atoi(r.Header.Get("X-Bench-Inst"))
		u.entries = append(u.entries, entry{inst: inst, sent: time.Duration(sent)})
	}
	gate := u.gate
	u.mu.Unlock()

	start := time.Now()
	switch {
	case hold == "gate":
		select {
		case <-gate:
		case <-r.Context().Done():
		}
	case hold != "":
		if d, err := time.ParseDuration(hold); err == nil && d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
			}
		}
	}

	// Leave before the response is written: the proxy can only release the lock after it
	// has the response, so the next holder cannot enter before this one has left.
	u.mu.Lock()
	u.busy += time.Since(start)
	rest := u.active[key][:0]
	for _, o := range u.active[key] {
		if o.id != me.id {
			rest = append(rest, o)
		}
	}
	if len(rest) == 0 {
		delete(u.active, key)
	} else {
		u.active[key] = rest
	}
	u.mu.Unlock()
	u.served.Add(1)
	w.Header().Set("Content-Type", "text/plain")
	w.Write([]byte("ok\n"))
}

// openGate lets every hold=gate request finish and arms a new gate for later ones.
func (u *upstream) openGate() {
	u.mu.Lock()
	close(u.gate)
	u.gate = make(chan struct{})
	u.mu.Unlock()
}

// record starts or stops recording entries; stopping returns them.
func (u *upstream) record(on bool) []entry {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.recording = on
	e := u.entries
	u.entries = nil
	return e
}

// takeBusy returns and resets the summed hold time.
func (u *upstream) takeBusy() time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	b := u.busy
	u.busy = 0
	return b
}

// violationCount returns the violations so far and the first few, as text.
func (u *upstream) violationCount() (int64, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.violations, append([]string(nil), u.violLog...)
}

func (u *upstream) close() { u.srv.Close() }
