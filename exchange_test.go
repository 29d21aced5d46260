package caddyredlock

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The response writer of a locked request, without Caddy: it passes everything through
// while the lock holds, and refuses every write after the loss (the real cases, through
// a real Caddy with reverse_proxy and FastCGI, are in safety_loss_test.go and
// safety_fastcgi_test.go).
func TestExchangeRefusesWritesAfterLoss(t *testing.T) {
	rec := httptest.NewRecorder()
	var x exchange
	x.begin(rec)
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
	x.begin(rec)
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

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }
