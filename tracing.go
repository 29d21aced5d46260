package caddyredlock

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// OpenTelemetry spans of a locked request (docs/tracing.md): redlock.acquire for the
// wait, redlock.hold from acquired until the request lets go of the lock. Both are
// children of the request's span, made by that span's own tracer provider: Caddy's
// `tracing` handler sets no global provider, and a request it does not trace (no
// `tracing` handler, or a trace not sampled) has a non-recording span, so nothing is
// created or allocated for it.

// tracerName is the instrumentation scope of the spans.
const tracerName = "github.com/caddy-redlock/caddy-redlock"

// Span and attribute names.
const (
	spanAcquire = "redlock.acquire"
	spanHold    = "redlock.hold"

	attrKey          = attribute.Key("redlock.key")
	attrMode         = attribute.Key("redlock.mode")
	attrResult       = attribute.Key("redlock.result")
	attrFencingToken = attribute.Key("redlock.fencing_token")
	attrLostReason   = attribute.Key("redlock.lost_reason")
	attrHoldEnd      = attribute.Key("redlock.hold_end")
)

// Values of redlock.result besides acquired, busy and unavailable (the metrics' words).
const (
	traceCanceled = "canceled" // the client went away (or Caddy exited) while waiting
	traceDryRun   = "dry_run"  // dry run: not acquired, the request was served unlocked
)

// lockSpan is one of a request's redlock spans; the zero value (an untraced request)
// does nothing.
type lockSpan struct {
	span      trace.Span
	key, mode string // for the hold span (the acquire span has them from the start)
}

// startAcquireSpan starts redlock.acquire under ctx's span, if that span records.
func startAcquireSpan(ctx context.Context, key, mode string) lockSpan {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return lockSpan{}
	}
	_, span := parent.TracerProvider().Tracer(tracerName).Start(ctx, spanAcquire,
		trace.WithAttributes(attrKey.String(key), attrMode.String(mode)))
	return lockSpan{span: span, key: key, mode: mode}
}

// acquired ends the acquire span (result acquired, and the fencing token) and starts the
// hold span, which the returned lockSpan ends (endHold). The hold span carries the key,
// mode and token too, so that either span alone says which lock it is about.
func (s lockSpan) acquired(ctx context.Context, l heldLocks) lockSpan {
	if s.span == nil {
		return lockSpan{}
	}
	attrs := []attribute.KeyValue{attrKey.String(s.key), attrMode.String(s.mode)}
	s.span.SetAttributes(attrResult.String(resultAcquired))
	if l.fencing() {
		// The fencing header's value (several keys: key=token pairs), as the upstream
		// sees it: one attribute type whatever the number of keys.
		tok := attrFencingToken.String(l.fencingHeader())
		s.span.SetAttributes(tok)
		attrs = append(attrs, tok)
	}
	s.span.End()
	_, hold := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, spanHold,
		trace.WithAttributes(attrs...))
	return lockSpan{span: hold, key: s.key, mode: s.mode}
}

// failed ends the acquire span of an acquire that returned err. The result is worked out
// in the order acquireFailed answers in: a cancelled wait first (a round cut short by
// the cancellation can look like a node failure), then dry run, which serves anything
// else unlocked.
func (s lockSpan) failed(ctx context.Context, err error, dryRun bool) {
	if s.span == nil {
		return
	}
	result := resultError
	switch {
	case ctx.Err() != nil:
		result = traceCanceled
	case dryRun:
		result = traceDryRun
	case isBusyErr(err):
		result = resultBusy
	case isUnavailable(err), errors.Is(err, redlock.ErrClosed):
		result = resultUnavailable
	}
	s.span.SetAttributes(attrResult.String(result))
	if result == resultUnavailable || result == resultError {
		// Answered 503 or 500: a failure of the service, unlike a busy key (423) or a
		// client that left.
		s.span.SetStatus(codes.Error, err.Error())
	}
	s.span.End()
}

// endHold ends the hold span: how is the hold metric's word for the way the lock was let
// go (released, handed_over, lost, drained). A lost lock marks the span as an error with
// the *redlock.LostError's reason.
func (s lockSpan) endHold(l heldLocks, how string) {
	if s.span == nil {
		return
	}
	s.span.SetAttributes(attrHoldEnd.String(how))
	if le, ok := errors.AsType[*redlock.LostError](l.err()); ok {
		s.span.SetAttributes(attrLostReason.String(string(le.Reason)))
		s.span.SetStatus(codes.Error, le.Error())
	}
	s.span.End()
}

// isBusyErr reports whether err says the key stayed busy for the whole wait.
func isBusyErr(err error) bool {
	_, ok := errors.AsType[*redlock.BusyError](err)
	return ok
}
