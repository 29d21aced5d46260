package caddyredlock

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The response writer of a locked request, without Caddy: it passes everything through
// while the lock holds, and refuses every write after the loss (the real cases, through
// a real Caddy with reverse_proxy and FastCGI, are in safety_loss_test.go and
// safety_fastcgi_test.go).
func TestExchangeRefusesWritesAfterLoss(t *testing.T) {
	rec := httptest.NewRecorder()
	var x exchange
	x.begin(context.Background(), rec)
	rc := http.NewResponseController(&x)
	if _, err := io.WriteString(&x, "before "); err != nil {
		t.Fatal(err)
	}
	if err := rc.Flush(); err != nil || !rec.Flushed {
		t.Fatalf("flush before the loss: %v (flushed %v)", err, rec.Flushed)
	}
	le := &redlock.LostError{Key: "k", Reason: redlock.LostForceReleased}
	// A copy (ReadFrom, as file_server's) stops at the loss, midway.
	src := io.MultiReader(strings.NewReader("copied "), readFunc(func([]byte) (int, error) { x.cut(le); return 0, io.EOF }),
		strings.NewReader("after the loss"))
	if _, err := io.Copy(&x, src); !errors.Is(err, le) {
		t.Errorf("copy across the loss: %v, want the loss", err)
	}
	if _, err := io.WriteString(&x, "after"); !errors.Is(err, le) {
		t.Errorf("write after the loss: %v, want an error wrapping the loss", err)
	}
	x.WriteHeader(http.StatusTeapot)
	if err := rc.Flush(); !errors.Is(err, le) {
		t.Errorf("flush after the loss: %v", err)
	}
	if _, _, err := rc.Hijack(); !errors.Is(err, le) {
		t.Errorf("hijack after the loss: %v", err)
	}
	if got := rec.Body.String(); got != "before copied " || rec.Code != 200 {
		t.Errorf("the client got %d %q, want 200 %q", rec.Code, got, "before copied ")
	}
	if !x.sent.Load() {
		t.Error("a response went out, but sent is false")
	}
}

// Nothing sent before the loss: the handler answers 503 itself, past the refusal, and a
// Content-Length the handler behind had set goes.
func TestExchangeAnswersLost(t *testing.T) {
	rec := httptest.NewRecorder()
	var x exchange
	x.begin(context.Background(), rec)
	x.cut(&redlock.LostError{Key: "k", Reason: redlock.LostExpired})
	x.Header().Set("Content-Length", "1234")
	x.WriteHeader(http.StatusOK) // refused
	if x.sent.Load() {
		t.Fatal("a refused WriteHeader counts as sent")
	}
	x.answerLost()
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" || rec.Header().Get("Content-Length") != "" {
		t.Errorf("answer: %d %v", rec.Code, rec.Header())
	}
}

// A cut reads as a cancellation and keeps its reason.
func TestCutCause(t *testing.T) {
	le := &redlock.LostError{Key: "k", Reason: redlock.LostMaxHold}
	var err error = cutCause{le}
	if !errors.Is(err, context.Canceled) || !isLost(err) || err.Error() != le.Error() {
		t.Errorf("cutCause: Is Canceled %v, isLost %v, %q", errors.Is(err, context.Canceled), isLost(err), err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(err)
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Error("the cause of a context cut by a loss is not a cancellation")
	}
}

// A cut that comes from further out first (found 2026-12-02): the context next runs under is
// cancelled by a loss (a holder's watch cancelling the routes Caddy runs after it) before
// the exchange's own watch has marked it. reverse_proxy answers that cancellation with a
// 499 of its own (Caddy 2.11): it must be refused, as must every write and body read, and
// the exchange must read as cut, so that the request gets its 503.
func TestExchangeRefusesWhatFollowsACutFromOutside(t *testing.T) {
	rec := httptest.NewRecorder()
	var x exchange
	parent, cutParent := context.WithCancelCause(context.Background())
	defer cutParent(nil)
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	x.begin(ctx, rec)
	body := x.watchBody(io.NopCloser(strings.NewReader("the body")))
	le := &redlock.LostError{Key: "k", Reason: redlock.LostForceReleased}
	cutParent(cutCause{le})
	x.WriteHeader(statusClientClosedRequest)
	if x.sent.Load() || rec.Code != http.StatusOK || rec.Flushed {
		t.Fatalf("reverse_proxy's 499 after the cut went through (sent %v, recorder %d)", x.sent.Load(), rec.Code)
	}
	if _, err := io.WriteString(&x, "after"); !errors.Is(err, le) {
		t.Errorf("write after the cut: %v, want the loss", err)
	}
	if _, err := body.Read(make([]byte, 4)); !errors.Is(err, le) {
		t.Errorf("body read after the cut: %v, want the loss", err)
	}
	if got := x.lostNow(); got != le {
		t.Errorf("lostNow: %v, want the loss", got)
	}
	if x.afterLoss(rec) || rec.Code != http.StatusServiceUnavailable {
		t.Errorf("after the cut: abort or %d, want a 503", rec.Code)
	}
}

// Caddy exiting cancels with a cut that is no loss: the handlers behind may still answer.
func TestExchangeExitIsNoLoss(t *testing.T) {
	rec := httptest.NewRecorder()
	var x exchange
	ctx, cancel := context.WithCancelCause(context.Background())
	x.begin(ctx, rec)
	cancel(cutCause{errors.New("redlock: caddy is exiting")})
	if x.lostNow() != nil {
		t.Fatal("an exit read as a loss")
	}
	x.WriteHeader(http.StatusBadGateway)
	if rec.Code != http.StatusBadGateway {
		t.Errorf("status %d after an exit, want it passed on", rec.Code)
	}
}

// A loss is a loss when the request's context ended before the lock's watch ran (found
// 2026-12-02): the watch reads the lock's own error then.
func TestLossOfRaceWithTheRequestsEnd(t *testing.T) {
	le := &redlock.LostError{Key: "k", Reason: redlock.LostForceReleased}
	for _, c := range []struct {
		name           string
		cause, lockErr error
		want           bool
	}{
		{"the lock's cause", le, le, true},
		{"the request ended first, the lock lost", context.Canceled, le, true},
		{"the request ended, the lock held", context.Canceled, nil, false},
		{"the request ended, the lock released", context.Canceled, redlock.ErrReleased, false},
	} {
		got, ok := lossOf(c.cause, c.lockErr)
		if ok != c.want || (ok && got != le) {
			t.Errorf("%s: %v %v, want %v", c.name, got, ok, c.want)
		}
	}
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

// discard is a ResponseWriter that drops everything (the benchmark measures the wrapper).
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// tableSink keeps the benchmarks' table entries on the heap, as the request table does.
var tableSink *inflight

// BenchmarkExchange: what a locked request pays for its exchange (the writer that
// refuses writes after a loss, the client trace that tells retries apart, the end
// readings), against the same steps without it. Each iteration is one request: the
// trace set up, reverse_proxy's own client trace composed with it, one round trip's
// hooks, a status and four body writes, and the end rule's readings. Both allocate the
// request's table entry, as ServeHTTP does (the exchange is a field of it).
func BenchmarkExchange(b *testing.B) {
	body := []byte(strings.Repeat("x", 512))
	repl := caddy.NewReplacer()
	repl.Set("http.reverse_proxy.retries", 0)
	proxyTrace := func(ctx context.Context) *httptrace.ClientTrace {
		// As reverse_proxy does for every round trip (its 1xx hook).
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(int, textproto.MIMEHeader) error { return nil }})
		return httptrace.ContextClientTrace(ctx)
	}
	b.Run("without", func(b *testing.B) {
		d := &discard{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			e := &inflight{}
			tableSink = e // as the request table keeps it
			var w http.ResponseWriter = d
			tr := proxyTrace(context.Background())
			if tr.GetConn != nil {
				tr.GetConn("")
			}
			w.WriteHeader(200)
			for range 4 {
				_, _ = w.Write(body)
			}
		}
	})
	b.Run("exchange", func(b *testing.B) {
		d := &discard{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			e := &inflight{}
			tableSink = e
			ctx := e.x.begin(context.Background(), d)
			var w http.ResponseWriter = &e.x
			tr := proxyTrace(ctx)
			tr.GetConn("")
			tr.WroteHeaders()
			w.WriteHeader(200)
			for range 4 {
				_, _ = w.Write(body)
			}
			_ = requestEnd{retries: proxyRetries(repl), unsent: e.x.unsent(), tunnel: tunnelEndOf(noTunnel, &e.x)}
		}
	})
}
