package main

// The upstream the explorer's routes reach: HTTP listeners (two, so that reverse_proxy
// has another upstream to retry on) and a FastCGI responder (Go's net/http/fcgi, working
// as PHP-FPM does: once its stdin is whole) that all write one work log. Each piece of
// work is recorded from its arrival to its end by the upstream's own account (work after
// the client or Caddy gave up included), with
// the fencing token it carried. What a piece of work does is told by headers the
// explorer's requests carry (X-Work, X-Work-First: workSpec).

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/fcgi"
	"strconv"
	"strings"
	"sync"
	"time"
)

// chunkEvery is how often streaming work writes a chunk.
const chunkEvery = 20 * time.Millisecond

// workSpec is what a piece of work does (X-Work: comma-separated "d=<duration>",
// "deaf", "late", "stream", "fail", "close"; or "accel": answer at once with
// X-Accel-Redirect, a handle_response first hop; "err500": answer 500 at once).
type workSpec struct {
	d      time.Duration
	deaf   bool // goes on for d whatever happens to its request (bounded: d)
	late   bool // headers only once the work is done
	stream bool // a chunk every chunkEvery
	fail   bool // answers 502 (fail500: 500) after the work
	status int  // the status of a failing answer
	close  bool // closes the connection midway, no answer
	accel  bool
	err500 bool
	ws     bool // a websocket (wsupstream.go): d is how long deaf work goes on once its tunnel broke
}

func parseWork(s string) workSpec {
	var w workSpec
	for f := range strings.SplitSeq(s, ",") {
		switch f = strings.TrimSpace(f); {
		case f == "deaf":
			w.deaf = true
		case f == "late":
			w.late = true
		case f == "stream":
			w.stream = true
		case f == "fail":
			w.fail, w.status = true, http.StatusBadGateway
		case f == "fail500":
			w.fail, w.status = true, http.StatusInternalServerError
		case f == "close":
			w.close = true
		case f == "accel":
			w.accel = true
		case f == "err500":
			w.err500 = true
		case f == "ws":
			w.ws = true
		case strings.HasPrefix(f, "d="):
			w.d, _ = time.ParseDuration(f[2:])
		}
	}
	return w
}

// How a piece of work ended, by the upstream's own account.
const (
	endCompleted = "completed"
	endCancelled = "cancelled"
)

// work is one piece of upstream work.
type work struct {
	req, lane string // X-Req-Id ("<lane>.<n>"), the lane it belongs to
	role      string // X-Role: what route sent it (work, retry, error, intercept, inner, ...)
	via       string // http, http2 (the second listener), fcgi
	token     string // the fencing token header as received
	spec      workSpec
	n         int // 1 for the request's first piece of work, 2 ...
	start     time.Time
	end       time.Time
	done      bool
	how       string
	chunks    []time.Time // when each chunk was written (chunk i carries i)
	bodyEnd   time.Time   // when the request body was read to its end (zero: no body, or it broke off)
}

// ledger is the upstream and its log.
type ledger struct {
	httpAddr, http2Addr, fcgiAddr string

	mu    sync.Mutex
	works []*work

	running sync.WaitGroup
	srvs    []*http.Server
	fln     net.Listener
	conns   sync.Map
}

func newLedger() (*ledger, error) {
	l := &ledger{}
	var lns []net.Listener
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, o := range lns {
				o.Close()
			}
			return nil, fmt.Errorf("upstream listener: %w", err)
		}
		lns = append(lns, ln)
	}
	l.httpAddr, l.http2Addr, l.fcgiAddr = lns[0].Addr().String(), lns[1].Addr().String(), lns[2].Addr().String()
	for i, via := range []string{"http", "http2"} {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, via) })}
		l.srvs = append(l.srvs, srv)
		go func() { _ = srv.Serve(lns[i]) }()
	}
	l.fln = lns[2]
	go func() {
		_ = fcgi.Serve(&trackedListener{Listener: lns[2], conns: &l.conns},
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, "fcgi") }))
	}()
	return l, nil
}

// close stops the listeners and waits for the work under way (each piece is bounded).
func (l *ledger) close() {
	for _, s := range l.srvs {
		_ = s.Close()
	}
	_ = l.fln.Close()
	l.conns.Range(func(c, _ any) bool { _ = c.(net.Conn).Close(); return true })
	l.running.Wait()
}

type trackedListener struct {
	net.Listener
	conns *sync.Map
}

func (t *trackedListener) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err == nil {
		t.conns.Store(c, nil)
	}
	return c, err
}

// reset forgets the log (between cases).
func (l *ledger) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.works = nil
}

// snapshot copies the log.
func (l *ledger) snapshot() []work {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]work, len(l.works))
	for i, w := range l.works {
		out[i] = *w
		out[i].chunks = append([]time.Time(nil), w.chunks...)
	}
	return out
}

// idle reports whether no work is under way.
func (l *ledger) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.works {
		if !w.done {
			return false
		}
	}
	return true
}

func (l *ledger) begin(r *http.Request, via string) *work {
	id := r.Header.Get("X-Req-Id")
	lane, _, _ := strings.Cut(id, ".")
	wk := &work{req: id, lane: lane, role: r.Header.Get("X-Role"), via: via,
		token: r.Header.Get("Redlock-Fencing-Token"), start: time.Now()}
	if wk.role == "" {
		wk.role = "work"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	sameRole := 0
	for _, o := range l.works {
		if o.req == id {
			wk.n++
			if o.role == wk.role {
				sameRole++
			}
		}
	}
	wk.n++
	// X-Work-First is the first attempt's work of the role that does the work (a retried
	// proxy's first try), never a handle_response first hop's.
	raw := r.Header.Get("X-Work")
	if first := r.Header.Get("X-Work-First"); first != "" && sameRole == 0 && raw != "accel" && !strings.Contains(raw, "fail500") {
		raw = first
	}
	wk.spec = parseWork(raw)
	l.works = append(l.works, wk)
	return wk
}

func (l *ledger) finish(wk *work, how string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wk.end, wk.done, wk.how = time.Now(), true, how
}

// chunk records a chunk and returns its text: "<req> <n> <index>\n", which the client
// reads back to tell when each byte it got was written.
func (l *ledger) chunk(wk *work) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	wk.chunks = append(wk.chunks, time.Now())
	return fmt.Sprintf("chunk %s %d %d\n", wk.req, wk.n, len(wk.chunks)-1)
}

func (l *ledger) serve(w http.ResponseWriter, r *http.Request, via string) {
	l.running.Add(1)
	defer l.running.Done()
	if r.URL.Path == "/auth" { // forward_auth's question (newshapes.go): no work
		if r.Header.Get("X-Auth") == "deny" {
			w.WriteHeader(http.StatusUnauthorized)
		} else {
			w.WriteHeader(http.StatusOK)
		}
		return
	}
	if r.Header.Get("X-Req-Id") == "" { // a probe (health), not the explorer's
		w.WriteHeader(http.StatusOK)
		return
	}
	if isWebsocket(r) {
		l.serveWS(w, r, via)
		return
	}
	var bodyEnd time.Time
	if via == "fcgi" && r.ContentLength != 0 && r.Body != nil {
		// A FastCGI application like PHP-FPM reads its whole stdin before it starts the
		// script: its work begins once the body is whole, and a body that broke off (Caddy
		// gave the request up) runs nothing. Go's net/http/fcgi would start at the first
		// stdin record and stream the rest.
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		bodyEnd = time.Now()
	}
	wk := l.begin(r, via)
	if !bodyEnd.IsZero() {
		l.mu.Lock()
		wk.bodyEnd = bodyEnd
		l.mu.Unlock()
	}
	if wk.spec.accel {
		w.Header().Set("X-Accel-Redirect", "/inner")
		w.WriteHeader(http.StatusNoContent)
		l.finish(wk, endCompleted)
		return
	}
	if wk.spec.err500 {
		w.WriteHeader(http.StatusInternalServerError)
		l.finish(wk, endCompleted)
		return
	}
	if via != "fcgi" && r.ContentLength != 0 && r.Body != nil {
		// Read the body as it comes (slow bodies); net/http/fcgi shares one reader among
		// bodiless requests, hence the length check.
		if _, err := io.Copy(io.Discard, r.Body); err == nil {
			l.mu.Lock()
			wk.bodyEnd = time.Now()
			l.mu.Unlock()
		}
	}
	rc := http.NewResponseController(w)
	write := func(s string) error {
		if _, err := io.WriteString(w, s); err != nil {
			return err
		}
		return rc.Flush()
	}
	if !wk.spec.late && !wk.spec.fail {
		w.WriteHeader(http.StatusOK)
		if err := rc.Flush(); err != nil && !wk.spec.deaf {
			l.finish(wk, endCancelled)
			return
		}
	}
	how := l.work1(wk, r.Context().Done(), func(i int) error {
		if wk.spec.close && i >= 2 {
			if c, _, err := rc.Hijack(); err == nil {
				c.Close()
			}
			return errClosed
		}
		if wk.spec.stream && !wk.spec.late && !wk.spec.fail {
			return write(l.chunk(wk))
		}
		return nil
	})
	if how == endCompleted && !wk.spec.close {
		switch {
		case wk.spec.fail:
			w.WriteHeader(wk.spec.status)
		case wk.spec.late:
			w.WriteHeader(http.StatusOK)
		}
		_ = write(l.chunk(wk))
		_ = write("END " + wk.req + " " + strconv.Itoa(len(wk.chunks)) + "\n")
	}
	l.finish(wk, how)
}

var errClosed = fmt.Errorf("upstream closed the connection on purpose")

// work1 paces the work: d long, tick every chunkEvery. Attentive work stops when
// cancelled or when a tick fails; deaf work goes on to d.
func (l *ledger) work1(wk *work, cancelled <-chan struct{}, tick func(i int) error) string {
	end := wk.start.Add(wk.spec.d)
	t := time.NewTicker(chunkEvery)
	defer t.Stop()
	for i := 0; time.Now().Before(end); i++ {
		if err := tick(i); err != nil {
			if err == errClosed {
				return endCancelled
			}
			if !wk.spec.deaf {
				return endCancelled
			}
		}
		select {
		case <-t.C:
		case <-cancelled:
			if !wk.spec.deaf {
				return endCancelled
			}
			cancelled = nil
		}
	}
	return endCompleted
}
