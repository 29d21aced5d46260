package caddyredlock

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The spans in a real Caddy, through a real exporter, are checked in
// tracing_caddy_test.go; here the rules: which result an acquire error gives, and that
// an untraced request costs nothing.

// TestTracingOffAllocatesNothing: a request without a recording span (no `tracing`
// handler, or a trace not sampled) creates no span and allocates nothing on the way
// through the handler's three tracing calls.
func TestTracingOffAllocatesNothing(t *testing.T) {
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	defer never.Shutdown(context.Background())
	unsampled, parent := never.Tracer("test").Start(context.Background(), "request")
	defer parent.End()
	busy := &redlock.BusyError{Key: "k"}
	for name, ctx := range map[string]context.Context{"no span": context.Background(), "not sampled": unsampled} {
		allocs := testing.AllocsPerRun(1000, func() {
			s := startAcquireSpan(ctx, "/doc/1", modeExclusive)
			s.failed(ctx, busy, false)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per request, want 0", name, allocs)
		}
		// What the handler then does with the zero lockSpan of an acquired lock.
		allocs = testing.AllocsPerRun(1000, func() {
			hold := lockSpan{}.acquired(ctx, nil)
			hold.endHold(nil, holdReleased)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per held lock, want 0", name, allocs)
		}
		if s := startAcquireSpan(ctx, "/doc/1", modeExclusive); s.span != nil {
			t.Errorf("%s: a span was started", name)
		}
	}
}

// TestAcquireSpanResults: the result attribute and status of a failed acquire, in the
// order acquireFailed answers in.
func TestAcquireSpanResults(t *testing.T) {
	busy := &redlock.BusyError{Key: "k"}
	unavailable := &redlock.UnavailableError{Key: "k", Quorum: 2}
	for _, tc := range []struct {
		name      string
		cancelled bool // the request's context is done
		err       error
		dryRun    bool
		result    string
		errStatus bool
	}{
		{"busy", false, busy, false, "busy", false},
		{"unavailable", false, unavailable, false, "unavailable", true},
		{"closed", false, redlock.ErrClosed, false, "unavailable", true},
		{"other error", false, errors.New("boom"), false, "error", true},
		{"cancelled while waiting", true, busy, false, "canceled", false},
		{"cancelled round looks unavailable", true, unavailable, false, "canceled", false},
		{"dry run busy", false, busy, true, "dry_run", false},
		{"dry run unavailable", false, unavailable, true, "dry_run", false},
		{"dry run cancelled", true, busy, true, "canceled", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			defer tp.Shutdown(context.Background())
			reqCtx, parent := tp.Tracer("test").Start(context.Background(), "request")
			ctx, cancel := context.WithCancel(reqCtx)
			defer cancel()
			if tc.cancelled {
				cancel()
			}
			startAcquireSpan(ctx, "/doc/1", modeShared).failed(ctx, tc.err, tc.dryRun)
			parent.End()
			spans := rec.Ended()
			if len(spans) != 2 || spans[0].Name() != "redlock.acquire" {
				t.Fatalf("spans: %v", spans)
			}
			s := spans[0]
			attrs := attribute.NewSet(s.Attributes()...)
			if v, _ := attrs.Value(attrResult); v.AsString() != tc.result {
				t.Errorf("redlock.result = %q, want %q", v.AsString(), tc.result)
			}
			if v, _ := attrs.Value(attrMode); v.AsString() != modeShared {
				t.Errorf("redlock.mode = %q", v.AsString())
			}
			if got := s.Status().Code == codes.Error; got != tc.errStatus {
				t.Errorf("error status %v, want %v (%v)", got, tc.errStatus, s.Status())
			}
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("parent %v, want the request's span %v", s.Parent().SpanID(), parent.SpanContext().SpanID())
			}
		})
	}
}

// BenchmarkAcquireSpan: what a request's acquire span costs, untraced and traced (an
// SDK provider that samples everything and drops the spans at the end).
func BenchmarkAcquireSpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	defer tp.Shutdown(context.Background())
	traced, parent := tp.Tracer("bench").Start(context.Background(), "request")
	defer parent.End()
	busy := &redlock.BusyError{Key: "k"}
	for name, ctx := range map[string]context.Context{"off": context.Background(), "on": traced} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				startAcquireSpan(ctx, "/doc/1", modeExclusive).failed(ctx, busy, false)
			}
		})
	}
}
