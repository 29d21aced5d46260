package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// waitContext behaves as context.WithDeadline(parent, deadline): Err without a timer,
// Done (made on demand) closing at the deadline or with the parent.
func TestWaitContextIsWithDeadline(t *testing.T) {
	w := newWaitContext(context.Background(), time.Now().Add(30*time.Millisecond))
	defer w.stop()
	if err := w.Err(); err != nil {
		t.Fatalf("Err before the deadline: %v", err)
	}
	if w.real != nil {
		t.Fatal("Err made a timer")
	}
	select {
	case <-w.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close at the deadline")
	}
	if err := w.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err after the deadline: %v", err)
	}

	// Past the deadline, no Done asked: Err says so from the clock.
	w2 := newWaitContext(context.Background(), time.Now().Add(-time.Millisecond))
	if err := w2.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err past the deadline: %v", err)
	}

	// The parent's cancellation and earlier deadline carry over.
	parent, cancel := context.WithTimeout(context.Background(), time.Minute)
	w3 := newWaitContext(parent, time.Now().Add(time.Hour))
	defer w3.stop()
	if d, _ := w3.Deadline(); d.After(time.Now().Add(2 * time.Minute)) {
		t.Fatalf("deadline %v: not the parent's earlier one", d)
	}
	cancel()
	if err := w3.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after the parent's cancel: %v", err)
	}
	select {
	case <-w3.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close with the parent")
	}
}

// An uncontended acquire's wait limit: WithDeadline (a timer set and stopped, a child
// registered with the request's context) against waitContext (Err only).
func BenchmarkWaitLimit(b *testing.B) {
	parent, cancel := context.WithCancel(context.Background()) // the request's context
	defer cancel()
	b.Run("WithDeadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithDeadline(parent, time.Now().Add(30*time.Second))
			_ = ctx.Err()
			cancel()
		}
	})
	b.Run("waitContext", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := newWaitContext(parent, time.Now().Add(30*time.Second))
			_ = w.Err()
			w.stop()
		}
	})
}
