package caddyredlock

// The upstream side of the request-lifecycle matrix (matrix_test.go): a ledger of every
// unit of work the cell's Caddy asks of its upstream, however it asks (HTTP, FastCGI,
// an upgraded tunnel), and a witness: another Redlock client that takes the cell's key
// whenever it is free. Both keep their events on the test process's clock, which the
// upstream, the witness, the clients and the faults all share.
//
// An attempt is one request as the upstream sees it: from the moment it arrives to the
// moment the upstream is done with it by its own account, including work it goes on
// with after Caddy or the client gave up (a deaf upstream, as a database transaction
// is). What it does is told by the X-Work header (workSpec); X-Work-First, if sent,
// replaces it for a request's first attempt (the retry end's slow first try).

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/fcgi"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// chunkEvery is how often a working upstream writes a chunk of its response.
const chunkEvery = 20 * time.Millisecond

// workSpec is what an attempt does, from its X-Work header: "accel", or comma-separated
// "d=<duration>", "deaf", "late", "stream".
type workSpec struct {
	d      time.Duration // how long the work takes
	deaf   bool          // works on for d whatever happens to its request (cancellation, failed writes)
	late   bool          // sends its response (headers included) only once the work is done
	stream bool          // writes a chunk every chunkEvery while it works (else the whole body at the end)
	accel  bool          // answers at once with X-Accel-Redirect: the handle_response row's first hop
}

func parseWork(s string) (workSpec, error) {
	var w workSpec
	if s == "accel" {
		return workSpec{accel: true}, nil
	}
	for f := range strings.SplitSeq(s, ",") {
		switch f = strings.TrimSpace(f); {
		case f == "deaf":
			w.deaf = true
		case f == "late":
			w.late = true
		case f == "stream":
			w.stream = true
		case strings.HasPrefix(f, "d="):
			d, err := time.ParseDuration(f[2:])
			if err != nil {
				return w, err
			}
			w.d = d
		default:
			return w, fmt.Errorf("work spec %q: unknown field %q", s, f)
		}
	}
	return w, nil
}

// How an attempt ended, by the upstream's own account.
const (
	endCompleted = "completed" // the work ran its whole course
	endCancelled = "cancelled" // it stopped early: its request was cancelled or a write failed
)

// attempt is one unit of upstream work.
type attempt struct {
	req, key, token string // X-Req-Id, X-Lock-Key ({http.redlock.key}), the fencing token
	via             string // http, fcgi or tunnel
	n               int    // 1 for the request's first attempt at this upstream, 2 for its second, ...
	spec            workSpec
	start, end      time.Time
	done            bool
	how             string // endCompleted or endCancelled, once done
	chunks          int    // chunks written (whether or not they reached anyone)
}

// ledger is one cell's upstream: an HTTP listener and a FastCGI listener (Go's
// net/http/fcgi, serving the same handler in this process) writing one record.
type ledger struct {
	t        *testing.T
	httpAddr string
	fcgiAddr string
	epoch    time.Time // the cell's start: times in reports are offsets from it

	mu       sync.Mutex
	attempts []*attempt
	lossSeen map[string]time.Time // request id -> when the test saw Caddy count the request's lock lost
	errs     []string             // upstream-side problems (bad work specs)

	work  sync.WaitGroup // handlers running (each ends within its work's duration plus a bounded wait)
	conns sync.Map       // FastCGI connections, closed at the end
}

// newLedger starts a cell's upstream; it stops, and waits for its handlers, when the
// test ends.
func newLedger(t *testing.T, epoch time.Time) *ledger {
	t.Helper()
	l := &ledger{t: t, epoch: epoch, lossSeen: map[string]time.Time{}}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hln.Close()
		t.Fatal(err)
	}
	l.httpAddr, l.fcgiAddr = hln.Addr().String(), fln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, "http") })}
	var servers sync.WaitGroup
	servers.Go(func() { _ = srv.Serve(hln) })
	servers.Go(func() {
		_ = fcgi.Serve(&trackedListener{Listener: fln, conns: &l.conns},
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, "fcgi") }))
	})
	t.Cleanup(func() {
		_ = srv.Close()
		_ = fln.Close()
		l.conns.Range(func(c, _ any) bool { _ = c.(net.Conn).Close(); return true })
		servers.Wait()
		l.work.Wait()
	})
	return l
}

// trackedListener records the connections it accepts so that they can be closed at the
// end (net/http/fcgi has no Close of its own).
type trackedListener struct {
	net.Listener
	conns *sync.Map
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.conns.Store(c, nil)
	}
	return c, err
}

// begin records an attempt's arrival and picks its work.
func (l *ledger) begin(r *http.Request, via string) *attempt {
	a := &attempt{req: r.Header.Get("X-Req-Id"), key: r.Header.Get("X-Lock-Key"),
		token: r.Header.Get("Redlock-Fencing-Token"), via: via, start: time.Now()}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.attempts {
		if b.req == a.req {
			a.n++
		}
	}
	a.n++
	raw := r.Header.Get("X-Work")
	if first := r.Header.Get("X-Work-First"); first != "" && a.n == 1 && raw != "accel" {
		raw = first
	}
	spec, err := parseWork(raw)
	if err != nil {
		l.errs = append(l.errs, err.Error())
	}
	a.spec = spec
	l.attempts = append(l.attempts, a)
	return a
}

func (l *ledger) finish(a *attempt, how string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a.end, a.done, a.how = time.Now(), true, how
}

// markLoss records that the test saw Caddy count req's lock lost: every chunk written
// for req from now on says so ("post"), and none may reach the client.
func (l *ledger) markLoss(req string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.lossSeen[req]; !ok {
		l.lossSeen[req] = time.Now()
	}
}

// chunk is the next chunk of a's response: its number and whether it is written after
// the request's lock was seen lost.
func (l *ledger) chunk(a *attempt) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	phase := "pre"
	if _, lost := l.lossSeen[a.req]; lost {
		phase = "post"
	}
	a.chunks++
	return fmt.Sprintf("c%03d %s\n", a.chunks, phase)
}

// snapshot copies the attempts.
func (l *ledger) snapshot() []attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]attempt, len(l.attempts))
	for i, a := range l.attempts {
		out[i] = *a
	}
	return out
}

// working reports whether req has an attempt under way that does the cell's work (not a
// handle_response hop).
func (l *ledger) working(req string) bool {
	for _, a := range l.snapshot() {
		if a.req == req && !a.spec.accel {
			return true
		}
	}
	return false
}

// allDone reports whether every attempt has ended, and the latest end.
func (l *ledger) allDone() (bool, time.Time) {
	var last time.Time
	for _, a := range l.snapshot() {
		if !a.done {
			return false, time.Time{}
		}
		if a.end.After(last) {
			last = a.end
		}
	}
	return true, last
}

// at formats t as an offset from the cell's start.
func (l *ledger) at(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("+%dms", t.Sub(l.epoch).Milliseconds())
}

func (l *ledger) describe(a attempt) string {
	end := "still running"
	if a.done {
		end = l.at(a.end) + " " + a.how
	}
	return fmt.Sprintf("%s attempt %d via %s [%s, %s] key=%q token=%s chunks=%d", a.req, a.n, a.via, l.at(a.start), end, a.key, a.token, a.chunks)
}

// serve is the upstream's handler for HTTP and FastCGI alike.
func (l *ledger) serve(w http.ResponseWriter, r *http.Request, via string) {
	l.work.Add(1)
	defer l.work.Done()
	if r.Header.Get("Upgrade") != "" {
		l.serveTunnel(w, r)
		return
	}
	a := l.begin(r, via)
	if a.spec.accel {
		w.Header().Set("X-Accel-Redirect", "/inner")
		w.WriteHeader(http.StatusNoContent)
		l.finish(a, endCompleted)
		return
	}
	if r.ContentLength != 0 {
		// The buffered row's request body. (Not read when there is none: net/http/fcgi
		// hands every bodiless request one shared strings.Reader, which concurrent
		// reads race on.)
		_, _ = io.Copy(io.Discard, r.Body)
	}
	rc := http.NewResponseController(w)
	write := func(s string) error {
		if _, err := io.WriteString(w, s); err != nil {
			return err
		}
		return rc.Flush()
	}
	if !a.spec.late {
		w.WriteHeader(http.StatusOK)
		if err := rc.Flush(); err != nil && !a.spec.deaf {
			l.finish(a, endCancelled)
			return
		}
	}
	how := l.work1(a, r.Context().Done(), func() error {
		if a.spec.stream && !a.spec.late {
			return write(l.chunk(a))
		}
		return nil
	})
	if how == endCompleted {
		if a.spec.late {
			w.WriteHeader(http.StatusOK)
			_ = write(l.chunk(a))
		}
		_ = write("done\n")
	}
	l.finish(a, how)
}

// work1 does a's work: d long, calling tick every chunkEvery. An attentive attempt
// stops when cancelled is closed or tick fails; a deaf one goes on. The ticker paces
// the work; it is no barrier.
func (l *ledger) work1(a *attempt, cancelled <-chan struct{}, tick func() error) string {
	end := a.start.Add(a.spec.d)
	t := time.NewTicker(chunkEvery)
	defer t.Stop()
	for time.Now().Before(end) {
		if err := tick(); err != nil && !a.spec.deaf {
			return endCancelled
		}
		select {
		case <-t.C:
		case <-cancelled:
			if !a.spec.deaf {
				return endCancelled
			}
			cancelled = nil // deaf: noticed, and ignored
		}
	}
	return endCompleted
}

// serveTunnel serves an Upgrade request: after the work's spec, it switches protocols
// (a late spec only once the work is done: Caddy's response_header_timeout may give up
// first) and streams its chunks over the raw connection, then "done"; the session ends
// at the client's end of stream (or a failed write, or a bounded wait).
func (l *ledger) serveTunnel(w http.ResponseWriter, r *http.Request) {
	a := l.begin(r, "tunnel")
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		l.finish(a, endCancelled)
		return
	}
	defer conn.Close()
	// The client's side ends when its connection reads an error or EOF: that is the
	// tunnel's cancellation.
	gone := make(chan struct{})
	var reader sync.WaitGroup
	switched := func() error {
		if _, err := io.WriteString(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: lines\r\nConnection: Upgrade\r\n\r\n"); err != nil {
			return err
		}
		if err := brw.Flush(); err != nil {
			return err
		}
		reader.Go(func() {
			defer close(gone)
			_, _ = io.Copy(io.Discard, brw)
		})
		return nil
	}
	defer reader.Wait()
	write := func(s string) error {
		if _, err := io.WriteString(brw, s); err != nil {
			return err
		}
		return brw.Flush()
	}
	if !a.spec.late {
		if err := switched(); err != nil {
			l.finish(a, endCancelled)
			return
		}
	}
	how := l.work1(a, gone, func() error {
		if a.spec.late {
			return nil
		}
		return write(l.chunk(a))
	})
	if how == endCompleted {
		if a.spec.late {
			if err := switched(); err != nil {
				l.finish(a, endCancelled)
				return
			}
		}
		if write("done\n") == nil {
			// A clean session ends at the client's end of stream; bounded, in case
			// it never comes.
			select {
			case <-gone:
			case <-time.After(10 * time.Second):
			}
		}
	}
	// The work is over either way; the connection closes as this returns (the reader
	// then ends).
	l.finish(a, how)
	_ = conn.Close()
}

// interval is a time span on the test's clock.
type interval struct{ from, to time.Time }

func overlaps(a, b interval) bool { return a.from.Before(b.to) && b.from.Before(a.to) }

// witness is another Redlock client on the cell's nodes: it tries to take the key
// every witnessEvery and, when it gets it, gives it back at once. Each of its holds is
// an interval in which the key was surely its own (from the moment Acquire returned to
// the moment Release was called): no request's work may overlap one.
type witness struct {
	c     *redlock.Client
	key   string
	stop  chan struct{}
	ended sync.WaitGroup

	mu    sync.Mutex
	holds []interval
	tries int
}

// witnessEvery paces the witness's tries; it is no barrier.
const witnessEvery = 25 * time.Millisecond

func newWitness(t *testing.T, servers []*redistest.Server, prefix, key string) *witness {
	t.Helper()
	// A short ttl: a try that a paused node answers only once resumed sets the key
	// then, for the ttl, although the witness gave that try up long before.
	c, err := redlock.New(redistest.URLs(servers), redlock.Options{Prefix: prefix, TTL: time.Second, NodeTimeout: matrixNodeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	w := &witness{c: c, key: key, stop: make(chan struct{})}
	t.Cleanup(func() {
		w.halt()
		_ = c.Close()
	})
	return w
}

// start begins the tries.
func (w *witness) start() {
	w.ended.Go(func() {
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			l, err := w.c.Acquire(ctx, w.key, redlock.AcquireOptions{})
			if err == nil {
				from := time.Now()
				to := time.Now()
				_ = l.Release(ctx)
				w.mu.Lock()
				w.holds = append(w.holds, interval{from, to})
				w.mu.Unlock()
			}
			cancel()
			w.mu.Lock()
			w.tries++
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-time.After(witnessEvery):
			}
		}
	})
}

// halt stops the tries and waits for the last one; it may be called more than once.
func (w *witness) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.ended.Wait()
}

func (w *witness) snapshot() (holds []interval, tries int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]interval(nil), w.holds...), w.tries
}

// heldSince returns the first hold that began at or after t.
func (w *witness) heldSince(t time.Time) (interval, bool) {
	holds, _ := w.snapshot()
	for _, h := range holds {
		if !h.from.Before(t) {
			return h, true
		}
	}
	return interval{}, false
}
