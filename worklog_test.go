package caddyredlock

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// A work log for upstreams that stand for several services of one key at once (a
// first hop and the upstream its route proxies to, a fallback): each records when a
// request's work began and ended there, by the upstream's own account (work after Caddy
// gave up on it included), and overlaps lists work of two requests that ran at once.

// workLog records, per upstream request, when its work began and ended (by the
// upstream's own account, work after Caddy gave up included).
type workLog struct {
	mu    sync.Mutex
	epoch time.Time
	spans []workSpan
}

type workSpan struct {
	req, what string
	from, to  time.Time
	done      bool
}

func newWorkLog() *workLog { return &workLog{epoch: time.Now()} }

func (l *workLog) begin(req, what string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spans = append(l.spans, workSpan{req: req, what: what, from: time.Now()})
	return len(l.spans) - 1
}

func (l *workLog) end(i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spans[i].to, l.spans[i].done = time.Now(), true
}

func (l *workLog) ms(t time.Time) int64 { return t.Sub(l.epoch).Milliseconds() }

// overlaps lists pairs of spans of different requests that overlapped in time.
func (l *workLog) overlaps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i, a := range l.spans {
		for _, b := range l.spans[i+1:] {
			if a.req == b.req {
				continue
			}
			ato, bto := a.to, b.to // still running: until now
			if !a.done {
				ato = time.Now()
			}
			if !b.done {
				bto = time.Now()
			}
			if a.from.Before(bto) && b.from.Before(ato) {
				out = append(out, fmt.Sprintf("req %s %s [+%dms,+%dms] overlaps req %s %s [+%dms,+%dms]",
					a.req, a.what, l.ms(a.from), l.ms(ato), b.req, b.what, l.ms(b.from), l.ms(bto)))
			}
		}
	}
	return out
}

func (l *workLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, s := range l.spans {
		end := "still running"
		if s.done {
			end = fmt.Sprintf("+%dms", l.ms(s.to))
		}
		fmt.Fprintf(&b, "  req %s %s [+%dms, %s]\n", s.req, s.what, l.ms(s.from), end)
	}
	return b.String()
}

// serveOn serves h on a fresh loopback listener until the test ends; it returns the
// address. Handlers are waited for at the end.
func serveOn(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var running sync.WaitGroup
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		defer running.Done()
		h(w, r)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		running.Wait()
	})
	return ln.Addr().String()
}

// sendAsync sends a GET with X-Req-Id id and returns a channel with its status.
func sendAsync(t *testing.T, c *http.Client, url, id string) <-chan int {
	ch := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, "GET", url, http.Header{"X-Req-Id": {id}})
		ch <- code
	}()
	return ch
}

// waitState waits until some in-flight request of key is in state st.
func waitState(key string, st requestState, d time.Duration) bool {
	return eventually(d, func() bool {
		for _, ri := range inflightRequests() {
			if ri.Key == key && ri.State == st {
				return true
			}
		}
		return false
	})
}

// sendAbort sends a GET with X-Req-Id id and gives up (closes the connection) after
// d; the channel gets the status, or 0 if the client gave up.
func sendAbort(c *http.Client, url, id string, d time.Duration) <-chan int {
	ch := make(chan int, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		req.Header.Set("X-Req-Id", id)
		resp, err := c.Do(req)
		if err != nil {
			ch <- 0
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		ch <- resp.StatusCode
	}()
	return ch
}

// checkNoOverlap fails t if work of two requests of key overlapped.
func (l *workLog) checkNoOverlap(t *testing.T, key string) {
	t.Helper()
	if ov := l.overlaps(); len(ov) > 0 {
		t.Errorf("two requests of key %q worked in the upstream at once:\n%s\nwork:\n%s", key, strings.Join(ov, "\n"), l)
	}
}

// roleOf is a request's X-Req-Id and the work it stands for: role when it carries the
// header (set by the route that sends it: a fallback, an error route), else "work".
func roleOf(r *http.Request, header, role string) (id, what string) {
	what = "work"
	if r.Header.Get(header) != "" {
		what = role
	}
	return r.Header.Get("X-Req-Id"), what
}
