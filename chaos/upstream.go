package main

import (
	"fmt"
	"net"
	"net/http"
	"slices"
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
	switch {
	case strings.HasPrefix(r.URL.Path, "/r/"), strings.HasPrefix(r.URL.Path, "/s/"),
		strings.HasPrefix(r.URL.Path, "/l/"), strings.HasPrefix(r.URL.Path, "/t/"):
	default:
		http.NotFound(w, r)
		return
	}
	key := r.Header.Get(headerKey)
	inst, _ := strconv.Atoi(r.Header.Get(headerInst))
	id := r.Header.Get(headerReq)
	v, ok, why := u.enter(r, key, inst, id)
	if !ok {
		http.Error(w, "rejected: "+why, http.StatusConflict)
		return
	}
	tok := v.token
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
			v.leave(true)
			return
		}
	}
	committed := v.write()
	v.leave(false)
	if !committed {
		http.Error(w, "rejected: stale token", http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "ok %s %d\n", key, tok)
}

// enter admits the request's visit to each of its keys (modes.go), or none of them. It
// judges the lock the route asks for (wantLock), not the one Caddy says it took: a
// writer taken shared, or a transfer holding one account, must not pass for correct; a
// lock other than the route's is counted as well.
func (u *upstream) enter(r *http.Request, key string, inst int, id string) (*visits, bool, string) {
	keys, tokens := lockedKeys(key, r.Header.Get(headerToken))
	mode, want := wantLock(r.Method, r.URL.Path)
	if got := r.Header.Get(headerMode); len(keys) > 0 && (got != mode || !slices.Equal(keys, want)) {
		u.led.mismatched(id, inst, fmt.Sprintf("%s %s took %q %s, want %q %s", r.Method, r.URL.Path, key, got, strings.Join(want, " "), mode))
	}
	keys = want
	if len(keys) == 0 {
		keys = []string{""} // the ledger counts it as unlocked
	}
	vs := &visits{led: u.led}
	for _, k := range keys {
		tok, has := tokens[k]
		v, ok, why := u.led.enterMode(k, mode, inst, tok, has, id, r.Header.Get(headerWait))
		if !ok {
			vs.leave(false)
			return nil, false, why
		}
		vs.all = append(vs.all, v)
		vs.token = max(vs.token, tok)
	}
	return vs, true, ""
}

// stream writes one fenced chunk every `every` for d. A chunk rejected by fencing stops
// the stream: it then waits (bounded) for Caddy to cancel the request, which it must do
// once its instance runs again and finds its lock gone.
func (u *upstream) stream(w http.ResponseWriter, r *http.Request, v *visits, d, every time.Duration) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	end := time.Now().Add(d)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; time.Now().Before(end); i++ {
		if !v.write() {
			u.awaitCancel(r, v)
			return
		}
		if _, err := fmt.Fprintf(w, "chunk %d\n", i); err != nil {
			v.leave(true)
			return
		}
		if err := rc.Flush(); err != nil {
			v.leave(true)
			return
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			v.leave(true)
			return
		}
	}
	if !v.write() {
		u.awaitCancel(r, v)
		return
	}
	v.leave(false)
	u.led.streamDone()
	_, _ = fmt.Fprint(w, "done\n")
}

// awaitCancel waits for the request of a superseded stream to be cancelled.
func (u *upstream) awaitCancel(r *http.Request, v *visits) {
	start := time.Now()
	t := time.NewTimer(u.staleWait)
	defer t.Stop()
	select {
	case <-r.Context().Done():
		v.leave(true)
	case <-t.C:
		v.staleNotCancelled(time.Since(start))
		v.leave(false)
	}
}

// visits are one request's visits, one per key it holds, written and left together.
type visits struct {
	led   *ledger
	all   []*visit
	token int64 // the largest, for the answer
}

// write is one fenced operation on every key: false if any rejects it.
func (vs *visits) write() bool {
	ok := true
	for _, v := range vs.all {
		ok = vs.led.write(v) && ok
	}
	return ok
}

func (vs *visits) leave(cancelled bool) {
	for _, v := range vs.all {
		vs.led.leave(v, cancelled)
	}
}

func (vs *visits) staleNotCancelled(waited time.Duration) {
	vs.led.staleNotCancelled(vs.all[0], waited)
}
