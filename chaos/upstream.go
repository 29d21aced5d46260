package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The checking upstream behind every Caddy instance. Requests:
//
//	GET /r/{id}?hold=15ms             enter, hold, commit (a fenced write), leave, answer
//	GET /r/{id}?stream=2s&every=50ms  enter, then one fenced write per chunk, leave, "done"
//
// Caddy sends the lock key (X-Lock-Key from {http.redlock.key}), the fencing token
// (Redlock-Fencing-Token), its instance number (X-Chaos-Inst) and the client's request id
// (X-Chaos-Req). The ledger judges every entry and write.
//
// It leaves its "inside" set BEFORE it writes the final part of a response: Caddy can
// release the lock only once it has the whole response, so the next holder cannot enter
// before this one has left.
type upstream struct {
	srv  *http.Server
	addr string
	led  *ledger

	// staleWait bounds how long a superseded stream waits for Caddy to cancel it.
	staleWait time.Duration

	serveDone chan struct{}
	active    atomic.Int64 // handlers still running
}

const (
	headerKey   = "X-Lock-Key"
	headerToken = "Redlock-Fencing-Token"
	headerInst  = "X-Chaos-Inst"
	headerReq   = "X-Chaos-Req"
	headerWait  = "X-Chaos-Wait-Ms"
)

func startUpstream(led *ledger, staleWait time.Duration) (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{addr: ln.Addr().String(), led: led, staleWait: staleWait, serveDone: make(chan struct{})}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(u.serveDone)
		_ = u.srv.Serve(ln)
	}()
	return u, nil
}

// close stops the server and waits (bounded by the stale wait) for its handlers: closing
// the connections cancels their requests.
func (u *upstream) close() {
	_ = u.srv.Close()
	<-u.serveDone
	deadline := time.Now().Add(u.staleWait + time.Second)
	for u.active.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.active.Add(1)
	defer u.active.Add(-1)
	if !strings.HasPrefix(r.URL.Path, "/r/") {
		http.NotFound(w, r)
		return
	}
	key := r.Header.Get(headerKey)
	inst, _ := strconv.Atoi(r.Header.Get(headerInst))
	id := r.Header.Get(headerReq)
	tokStr := r.Header.Get(headerToken)
	tok, err := strconv.ParseInt(tokStr, 10, 64)
	hasToken := err == nil && tok > 0

	v, ok, why := u.led.enter(key, inst, tok, hasToken, id, r.Header.Get(headerWait))
	if !ok {
		http.Error(w, "rejected: "+why, http.StatusConflict)
		return
	}
	q := r.URL.Query()
	if d, err := time.ParseDuration(q.Get("stream")); err == nil && d > 0 {
		every, err := time.ParseDuration(q.Get("every"))
		if err != nil || every <= 0 {
			every = 50 * time.Millisecond
		}
		u.stream(w, r, v, d, every)
		return
	}
	hold, _ := time.ParseDuration(q.Get("hold"))
	if hold > 0 {
		t := time.NewTimer(hold)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			u.led.leave(v, true)
			return
		}
	}
	committed := u.led.write(v)
	u.led.leave(v, false)
	if !committed {
		http.Error(w, "rejected: stale token", http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "ok %s %d\n", key, tok)
}

// stream writes one fenced chunk every `every` for d. A chunk rejected by fencing stops
// the stream: it then waits (bounded) for Caddy to cancel the request, which it must do
// once its instance runs again and finds its lock gone.
func (u *upstream) stream(w http.ResponseWriter, r *http.Request, v *visit, d, every time.Duration) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	end := time.Now().Add(d)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; time.Now().Before(end); i++ {
		if !u.led.write(v) {
			u.awaitCancel(r, v)
			return
		}
		if _, err := fmt.Fprintf(w, "chunk %d\n", i); err != nil {
			u.led.leave(v, true)
			return
		}
		if err := rc.Flush(); err != nil {
			u.led.leave(v, true)
			return
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			u.led.leave(v, true)
			return
		}
	}
	if !u.led.write(v) {
		u.awaitCancel(r, v)
		return
	}
	u.led.leave(v, false)
	u.led.streamDone()
	_, _ = fmt.Fprint(w, "done\n")
}

// awaitCancel waits for the request of a superseded stream to be cancelled.
func (u *upstream) awaitCancel(r *http.Request, v *visit) {
	start := time.Now()
	t := time.NewTimer(u.staleWait)
	defer t.Stop()
	select {
	case <-r.Context().Done():
		u.led.leave(v, true)
	case <-t.C:
		u.led.staleNotCancelled(v, time.Since(start))
		u.led.leave(v, false)
	}
}
