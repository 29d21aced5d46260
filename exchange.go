package caddyredlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// This file holds what the handler watches of a locked request's exchange with the
// handlers behind it (next), in one value per request: a field of the request's table
// entry, so it costs no allocation of its own.
//
//   - The response writer next gets. Once the request's lock is lost (outside dry run),
//     every write through it fails, whatever the handler behind: cancelling the request
//     stops reverse_proxy, but not a FastCGI transport, which ignores the context once
//     it has dialed, nor a handler that does not watch the context. The handler then
//     answers 503 itself if nothing reached the client yet, and aborts the response if
//     something did, so that the client never takes a cut response for a whole one.
//   - The client's connection of an Upgrade request, once hijacked (tunnel.go).
//   - The requests Go's HTTP transport started, wrote to upstreams and got answers to (a
//     client trace): they tell a reverse_proxy retry after a dial error (the upstream
//     never saw the request) from one after an attempt that may still run, and show an
//     attempt given up unanswered by any proxy behind, nested ones included (endrule.go).

// exchange is a locked request's response writer and what is seen of its exchange.
type exchange struct {
	caddyhttp.ResponseWriterWrapper
	// lost is set when the lock is lost outside dry run, just before the request is
	// cancelled: writes, flushes and hijacks fail from then on. Read it through
	// lostNow, which also sees a cut that came from further out first.
	lost atomic.Pointer[redlock.LostError]
	// ctx is the context next runs under (begin): cancelled by a cut, this one's or one
	// further out (lostNow).
	ctx context.Context
	// sent reports whether a final status, body bytes, a flush or a hijack went through
	// to the client's side: then a response has begun and no other can be answered.
	sent atomic.Bool
	conn atomic.Pointer[watchedConn] // an Upgrade's hijacked connection (tunnel.go)
	// The client trace handed to next's context, and what it counted.
	trace    httptrace.ClientTrace
	started  atomic.Int32 // round trips started (GetConn: before any dial)
	written  atomic.Int32 // requests whose headers were written to an upstream connection
	answered atomic.Int32 // round trips that got a first byte of response
	body     watchedBody  // the request body, watched (watchBody)
}

// begin readies x for a request answered on w, and returns ctx with x's client trace.
func (x *exchange) begin(ctx context.Context, w http.ResponseWriter) context.Context {
	x.ResponseWriter = w
	x.ctx = ctx
	x.trace.GetConn = x.getConn
	x.trace.WroteHeaders = x.wroteHeaders
	x.trace.GotFirstResponseByte = x.gotFirstResponseByte
	return httptrace.WithClientTrace(ctx, &x.trace)
}

func (x *exchange) getConn(string)        { x.started.Add(1) }
func (x *exchange) wroteHeaders()         { x.written.Add(1) }
func (x *exchange) gotFirstResponseByte() { x.answered.Add(1) }

// unsent is how many traced round trips ended before writing their request: dial and
// TLS errors, where the upstream never saw it.
func (x *exchange) unsent() int {
	return int(x.started.Load() - x.written.Load())
}

// unanswered is how many traced requests were written to an upstream and got no
// response: each was given up (a response_header_timeout, a broken connection) while
// the upstream may still work on it, whoever retried it. Counted here rather than read
// from {http.reverse_proxy.retries}, which holds only the last proxy's count: a proxy
// nested in another's handle_response retries unseen once the outer one sets it.
func (x *exchange) unanswered() int {
	return int(x.written.Load() - x.answered.Load())
}

// cut refuses every write and request body read from now on: the lock le is gone. A
// body read already waiting for the client is refused when it returns (watchedBody); it
// is not woken: a read deadline set from here could outlive the request and fall on the
// connection's next one.
func (x *exchange) cut(le *redlock.LostError) { x.lost.Store(le) }

// lostNow is the loss that cuts x, if any: the one its watch recorded (cut), or the one
// a watch further out cancelled x's context with before x's own watch ran. A block
// served under a held lock in an error route is watched twice, by the holder (outer.go,
// which cancels the routes' context) and by itself (under.go), each woken in a goroutine
// of its own, in no set order; and reverse_proxy answers a cancellation with a 499
// status of its own (Caddy 2.11), which must not go through as if it were the response
// (found 2026-12-02: that 499 made the block's end abort the response, and the client got a cut
// connection, not its 503). So a cancellation by a lock's loss refuses what follows it,
// whichever watch made it. Caddy exiting (a cut without a loss) refuses nothing.
func (x *exchange) lostNow() *redlock.LostError {
	if le := x.lost.Load(); le != nil {
		return le
	}
	if x.ctx == nil || x.ctx.Err() == nil {
		return nil
	}
	c, ok := context.Cause(x.ctx).(cutCause)
	if !ok {
		return nil
	}
	le, ok := errors.AsType[*redlock.LostError](c.why)
	if !ok {
		return nil
	}
	x.lost.CompareAndSwap(nil, le)
	return x.lost.Load()
}

// afterLoss ends the response of a request cut by a loss, once the handlers behind have
// returned: a 503 if nothing reached the client yet; else the response must be aborted
// (abort: the caller panics with http.ErrAbortHandler), so that the client never takes a
// cut response for a whole one, unless a hijacked connection was closed with its tunnel
// already. A response held back by an intercept around the handler (w's chain) is
// aborted too: its routes could run on the answer (a 5xx fallback that proxies again).
func (x *exchange) afterLoss(w http.ResponseWriter) (abort bool) {
	switch {
	case !x.sent.Load():
		x.answerLost()
	case x.conn.Load() == nil:
		abort = true
	}
	return abort || bufferedOutside(w)
}

// watchBody returns body watched by x (the same body if there is none to read): once
// the lock is lost, every read fails, and the bytes of a read that was waiting when the
// loss came are dropped. A FastCGI application starts a script only once its whole
// stdin has come (PHP-FPM), and Caddy's FastCGI transport streams the body on whatever
// the context says: a body that completed after the loss would run the request beside
// the next holder (round 5, hole 7).
func (x *exchange) watchBody(body io.ReadCloser) io.ReadCloser {
	if body == nil || body == http.NoBody {
		return body
	}
	x.body = watchedBody{ReadCloser: body, x: x}
	return &x.body
}

// watchedBody is a request body read under a lock (exchange.watchBody). It has no
// WriteTo: a copy goes through Read.
type watchedBody struct {
	io.ReadCloser
	x *exchange // whose loss refuses reads
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if le := b.x.lostNow(); le != nil {
		return 0, refusedRead(le)
	}
	n, err := b.ReadCloser.Read(p)
	if le := b.x.lostNow(); le != nil {
		return 0, refusedRead(le) // read while the loss came: its bytes may be after it
	}
	return n, err
}

// refusedRead is the error of a body read after the loss.
func refusedRead(le *redlock.LostError) error {
	return fmt.Errorf("redlock: request body read refused: %w", le)
}

// refused is the error of a write after the loss.
func refused(le *redlock.LostError) error {
	return fmt.Errorf("redlock: response write refused: %w", le)
}

func (x *exchange) markSent() {
	if !x.sent.Load() {
		x.sent.Store(true)
	}
}

// WriteHeader passes the status on unless the lock is lost (then nothing is written:
// the handler answers once next has returned).
func (x *exchange) WriteHeader(code int) {
	if x.lostNow() != nil {
		return
	}
	if code >= 200 || code == http.StatusSwitchingProtocols {
		x.markSent()
	}
	x.ResponseWriter.WriteHeader(code)
}

func (x *exchange) Write(p []byte) (int, error) {
	if le := x.lostNow(); le != nil {
		return 0, refused(le)
	}
	x.markSent()
	return x.ResponseWriter.Write(p)
}

// copyBuffers are ReadFrom's buffers (io.Copy would allocate 32 KiB a call).
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// ReadFrom implements io.ReaderFrom through Write, so that a loss stops the copy midway
// (the wrapped writer's ReadFrom, sendfile for a file, could not be stopped). The
// reader is hidden behind readOnly so that a WriterTo cannot bypass Write either.
func (x *exchange) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	return io.CopyBuffer(writeOnly{x}, readOnly{r}, *bp)
}

type writeOnly struct{ w io.Writer }

func (w writeOnly) Write(p []byte) (int, error) { return w.w.Write(p) }

type readOnly struct{ r io.Reader }

func (r readOnly) Read(p []byte) (int, error) { return r.r.Read(p) }

// FlushError flushes through the wrapped writer (http.ResponseController), unless the
// lock is lost: a flush of a response not begun would send a 200.
func (x *exchange) FlushError() error {
	if le := x.lostNow(); le != nil {
		return refused(le)
	}
	x.markSent()
	return http.NewResponseController(x.ResponseWriter).Flush()
}

// Flush implements http.Flusher for handlers that assert it (ResponseController uses
// FlushError).
func (x *exchange) Flush() { _ = x.FlushError() }

// Hijack implements http.Hijacker through the wrapped writer (http.ResponseController)
// and hands back a watched connection (tunnel.go).
func (x *exchange) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if le := x.lostNow(); le != nil {
		return nil, nil, refused(le)
	}
	c, brw, err := http.NewResponseController(x.ResponseWriter).Hijack()
	if err != nil {
		return c, brw, err
	}
	x.markSent()
	wc := &watchedConn{Conn: c, x: x}
	x.conn.Store(wc)
	return wc, brw, nil
}

// tunnelEnd says how the tunnel of an Upgrade request ended, once next has returned.
func (x *exchange) tunnelEnd() tunnelEnd {
	c := x.conn.Load()
	switch {
	case c == nil:
		return tunnelNone // not hijacked: the upstream answered without switching protocols
	case c.readEOF.Load() && c.wroteEOF.Load():
		return tunnelClean
	}
	return tunnelCut
}

// answerLost answers a request whose lock was lost before anything reached its client:
// 503 with Retry-After, written past the refusal. The handlers behind may have set
// headers for the response they could not send; a Content-Length among them would
// describe a body that never comes.
func (x *exchange) answerLost() {
	h := x.ResponseWriter.Header()
	h.Del("Content-Length")
	h.Set("Retry-After", "1")
	x.ResponseWriter.WriteHeader(http.StatusServiceUnavailable)
}

// cutCause is the cause the handler cancels a request's context with when it cuts the
// request itself (its lock lost, Caddy exiting). To the handlers behind it reads as a
// cancellation (errors.Is(err, context.Canceled)): net/http hands a cancelled request's
// cause back as the round trip's error, and reverse_proxy takes only context.Canceled
// for no fault of the upstream (no passive-health failure, no retry, and no error
// returned, so handle_errors cannot proxy the request again, unlocked). The reason stays
// inside (errors.As finds the *redlock.LostError) for the handler, logs and metrics.
type cutCause struct{ why error }

func (c cutCause) Error() string        { return c.why.Error() }
func (c cutCause) Unwrap() error        { return c.why }
func (c cutCause) Is(target error) bool { return target == context.Canceled }
