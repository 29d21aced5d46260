package transport

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher sends the per-request scripts (acquire, release) of all concurrent callers to
// one node as pipelines: while one batch is on the wire, the calls that arrive queue up
// and go out together in the next one. A busy node then costs one write, one read and
// one round trip per batch instead of per command, on both sides. A lone call goes out
// at once.
//
// Why not go-redis's autopipeliner: it does not honour a command's own deadline once
// the command is queued, so calls queued behind a batch stuck on a paused node were
// sent long after their round had given up (and a dead majority took seconds, not a
// node timeout, to report). Here:
//   - a call whose deadline passed while queued is dropped, never sent late, and a sent
//     batch is bounded by its earliest deadline; as calls queue in deadline order, every
//     call is answered by its own deadline (the node timeout), give or take scheduling;
//   - one flusher per node sends batches strictly in order, so a round's cleanup
//     release never overtakes that round's SET to the same node on a connection that
//     lives. A batch that times out costs its connection (go-redis closes it), and
//     what it sent may still arrive (a paused node reads it when it resumes, a proxy
//     forwards it late); a release then sent on a new connection is ordered by the
//     network and the node, no longer by us. If the late SET runs after it, the node
//     keeps a value nobody holds for one ttl: one refusal there, never a second holder
//     (the value is that attempt's; renewals and takeovers compare it);
//   - replies are delivered by callback, so a round needs no goroutine or timer per node.
type batcher struct {
	nd     *Node
	mu     sync.Mutex
	queue  []*call
	closed bool
	wake   chan struct{}
	// free holds calls delivered and done with, for submit to reuse (guarded by mu), and
	// spare the array of the last batch sent, for the queue to reuse (the flusher's): on
	// the hot path of every lock, a call costs no allocation of its own.
	free  []*call
	spare []*call
	// conn is the flusher's own connection (only the flusher touches it), taken from the
	// client's pool once and kept while it works: a pool get per batch costs a
	// non-blocking read (go-redis's health check of a pooled connection) and the pool's
	// bookkeeping on every batch. Once it fails, it is closed and the next batch takes
	// another (exec).
	conn *redis.Conn

	batches, sent atomic.Int64 // pipelines and calls sent, for tests and benchmarks
}

// Command is what one round or release sends to every node: a script, as EVALSHA (as
// EVAL with its text after NOSCRIPT, or while its digest is not known: digest.go), or
// with script nil the plain command in argv. It is built once and shared, read-only, by
// every node's call: a lock costs one argument list per round, not one per node (a
// script's digest is the same on every node).
type Command struct {
	script *Script
	keys   []string
	argv   []any
	args   []any    // as sent: evalsha sha numkeys keys... argv... (or eval text ...), or argv
	then   *Command // sent behind it on the same connection (Then)
}

// Then makes after go behind c on the same connection, in the same pipeline, and c's
// Reply carry after's (Reply.Then). A pipeline sends each distinct after (by pointer) once,
// behind every call of the pipeline that names it: commands that share one after (a read
// that must follow them, such as the data marker's GET behind plain SETs) pay for it once
// per batch, not once per call. after must be a plain command (no script) without a then
// of its own. Without pipelining, c and after go in a pipeline of their own. Redis runs a
// connection's commands one at a time in the order they were sent, so after runs once c
// has run. It returns c.
func (c *Command) Then(after *Command) *Command {
	c.then = after
	return c
}

// NewCommand builds the command that runs script (nil: the plain command argv) with
// keys and argv.
func NewCommand(script *Script, keys []string, argv ...any) *Command {
	if script == nil {
		return &Command{argv: argv, args: argv}
	}
	args := make([]any, 0, 3+len(keys)+len(argv))
	if sha := script.digest(); sha != "" {
		args = append(args, "evalsha", sha, len(keys))
	} else {
		args = append(args, "eval", script.src, len(keys))
	}
	for _, k := range keys {
		args = append(args, k)
	}
	return &Command{script: script, keys: keys, argv: argv, args: append(args, argv...)}
}

// A Sink receives the replies of calls (Node.Send): Deliver(i, r) exactly once per call,
// with the index the call was sent with, on the flusher's goroutine (or on the sender's,
// once the node is closed; on a goroutine of the call's own without pipelining). It must
// not block. One value serves every node of a round: no closure per call.
type Sink interface {
	Deliver(i int, r Reply)
}

// deliverFunc is a Sink of one function, for Call.
type deliverFunc func(Reply)

func (f deliverFunc) Deliver(_ int, r Reply) { f(r) }

// call is one node's share of a command, waiting for its batch.
type call struct {
	cmd      *Command
	deadline time.Time
	reply    *redis.Cmd // set once sent
	then     *Reply     // the reply of cmd.then, sent behind it (shared by the pipeline's calls)
	sink     Sink       // receives the reply
	i        int        // the index the sink gets with it
}

// fail answers c with err, unsent.
func (c *call) fail(err error) {
	c.sink.Deliver(c.i, Reply{err: err})
}

// maxPipeline bounds one batch, so one pipeline never holds a node long.
const maxPipeline = 256

func newBatcher(nd *Node) *batcher {
	return &batcher{nd: nd, wake: make(chan struct{}, 1)}
}

// Flush runs the node's batcher (its flusher) until ctx ends, then fails the calls
// still queued and every later one with Config.Closed. Its owner runs it on a goroutine
// of its own; without Config.Pipelining it returns at once.
func (n *Node) Flush(ctx context.Context) {
	if n.batch != nil {
		n.batch.run(ctx)
	}
}

// Batches reports how many pipelines and calls the batcher sent so far (tests and
// benchmarks); zeros without pipelining.
func (n *Node) Batches() (batches, sent int64) {
	if n.batch == nil {
		return 0, 0
	}
	return n.batch.batches.Load(), n.batch.sent.Load()
}

// Call is Send with a function for the reply.
func (n *Node) Call(ctx context.Context, cmd *Command, deliver func(Reply)) {
	n.Send(ctx, cmd, deliverFunc(deliver), 0)
}

// Send sends cmd to the node and hands the reply to sink with i, exactly once and by
// about the node timeout (or ctx's deadline, if sooner): through the batcher when
// pipelining, else on a connection and goroutine of its own. The call is not cancelled
// with ctx: a caller may stop waiting early (a release returns at a quorum of deletes)
// while the rest must still reach their nodes.
func (n *Node) Send(ctx context.Context, cmd *Command, sink Sink, i int) {
	deadline := time.Now().Add(n.cfg.NodeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if n.batch != nil {
		n.batch.submit(deadline, sink, i, cmd)
		return
	}
	deliver := func(r Reply) { sink.Deliver(i, r) }
	go func() {
		// Not cancelled with ctx: the batcher does not cancel sent calls either. Each is
		// bounded by its deadline.
		cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		if cmd.then != nil {
			rs, err := n.Pipeline(cctx, cmd.args, cmd.then.args)
			for i := range rs {
				if rs[i].err == nil && rs[i].val == nil && err != nil {
					rs[i].err = err // the connection could not be set up (as in exec)
				}
			}
			r := rs[0]
			r.then = &rs[1]
			deliver(r)
			return
		}
		if cmd.script == nil {
			deliver(n.Do(cctx, cmd.argv...))
			return
		}
		deliver(cmd.script.Run(cctx, n, cmd.keys, cmd.argv...))
	}()
}

// run is the node's flusher; it ends with ctx.
func (b *batcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			b.close(b.nd.cfg.Closed)
			if b.conn != nil {
				b.conn.Close()
				b.conn = nil
			}
			return
		case <-b.wake:
		}
		// Let the callers that are runnable right now enqueue first: concurrent
		// requests then share this pipeline instead of each paying a write and a read
		// on both sides. With nothing else runnable (a lone call) this returns at once.
		runtime.Gosched()
		for {
			batch := b.take()
			if len(batch) == 0 {
				break
			}
			b.send(ctx, batch)
		}
	}
}

// submit queues cmd for the node; sink gets the reply by deadline (see above).
func (b *batcher) submit(deadline time.Time, sink Sink, i int, cmd *Command) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		sink.Deliver(i, Reply{err: b.nd.cfg.Closed})
		return
	}
	var c *call
	if n := len(b.free); n > 0 {
		c, b.free = b.free[n-1], b.free[:n-1]
	} else {
		c = new(call)
	}
	*c = call{cmd: cmd, deadline: deadline, sink: sink, i: i}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take removes up to maxPipeline calls from the queue, failing those already expired.
func (b *batcher) take() []*call {
	b.mu.Lock()
	batch := b.queue
	if len(batch) > maxPipeline {
		batch, b.queue = batch[:maxPipeline:maxPipeline], batch[maxPipeline:]
	} else {
		b.queue, b.spare = b.spare[:0], nil // the last batch's array, done with
	}
	b.mu.Unlock()
	now := time.Now()
	live := batch[:0]
	for _, c := range batch {
		if !now.Before(c.deadline) {
			c.fail(context.DeadlineExceeded)
			continue
		}
		live = append(live, c)
	}
	return live
}

// send writes one batch as a pipeline, bounded by its earliest deadline, and delivers
// each call's reply. Calls refused with NOSCRIPT (the node restarted, SCRIPT FLUSH) are
// sent once more as EVAL, with the script's text: that caches the script for the next
// EVALSHA and, unlike SCRIPT LOAD, needs no permission beyond EVAL (an ACL user
// without +script|load would otherwise get NOSCRIPT on every call, forever).
func (b *batcher) send(ctx context.Context, batch []*call) {
	earliest := batch[0].deadline
	for _, c := range batch[1:] {
		if c.deadline.Before(earliest) {
			earliest = c.deadline
		}
	}
	ctx = deadlineCtx{ctx, earliest}
	b.batches.Add(1)
	b.sent.Add(int64(len(batch)))
	b.exec(ctx, batch, false)
	if retry := noScriptRetry(batch); len(retry) > 0 && time.Now().Before(earliest) {
		b.exec(ctx, retry, true)
	}
	for _, c := range batch {
		r := replyOf(c.reply)
		r.then = c.then
		c.sink.Deliver(c.i, r)
	}
	b.recycle(batch)
}

// recycle takes back a sent batch's calls, delivered and done with, and keeps its array
// for the queue (flusher only).
func (b *batcher) recycle(batch []*call) {
	b.mu.Lock()
	for i, c := range batch {
		*c = call{}
		if len(b.free) < maxPipeline {
			b.free = append(b.free, c)
		}
		batch[i] = nil
	}
	b.mu.Unlock()
	if cap(batch) <= maxPipeline {
		b.spare = batch[:0]
	}
}

// exec sends calls in one pipeline and stores each reply in the call; scripts go as
// EVALSHA, or as EVAL with full.
func (b *batcher) exec(ctx context.Context, calls []*call, full bool) {
	if b.conn == nil {
		b.conn = b.nd.client.Conn()
	}
	pipe := b.conn.Pipeline()
	for _, c := range calls {
		if full {
			c.reply = pipe.Eval(ctx, c.cmd.script.src, c.cmd.keys, c.cmd.argv...)
			continue
		}
		c.reply = redis.NewCmd(ctx, c.cmd.args...)
		_ = pipe.Process(ctx, c.reply) // queued: the reply comes with Exec
	}
	// Each distinct Then once, behind every call of this pipeline (Command.Then). A
	// batch has one or two: a linear search beats a map.
	var thens []*Command
	var thenCmds []*redis.Cmd
	for _, c := range calls {
		if c.cmd.then != nil && !slices.Contains(thens, c.cmd.then) {
			tc := redis.NewCmd(ctx, c.cmd.then.args...)
			_ = pipe.Process(ctx, tc)
			thens, thenCmds = append(thens, c.cmd.then), append(thenCmds, tc)
		}
	}
	_, execErr := pipe.Exec(ctx) // per-command errors are in the replies...
	bad := false
	for _, c := range calls {
		if c.reply.Err() == nil && c.reply.Val() == nil && execErr != nil {
			// ...except when the connection could not be set up (WRONGPASS, NOAUTH):
			// go-redis then returns the error from Exec only.
			c.reply.SetErr(execErr)
			bad = true
		}
		bad = bad || (c.reply.Err() != nil && !isRedisError(c.reply.Err()))
	}
	for i, tc := range thenCmds {
		if tc.Err() == nil && tc.Val() == nil && execErr != nil {
			tc.SetErr(execErr)
		}
		bad = bad || (tc.Err() != nil && !isRedisError(tc.Err()))
		r := replyOf(tc)
		for _, c := range calls {
			if c.cmd.then == thens[i] {
				c.then = &r
			}
		}
	}
	if bad {
		// The connection failed (a timeout, a reset, a refused dial, a failed hello):
		// go-redis marked it bad, and closing it takes it out of the pool. The next batch
		// takes another. An error reply (NOSCRIPT, OOM) leaves it as good as it was.
		b.conn.Close()
		b.conn = nil
	}
}

// isRedisError reports whether err is an error reply of the server (NOSCRIPT, OOM, ...).
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// noScriptRetry lists, in order, what must go again with the scripts' text: the
// calls refused with NOSCRIPT, and every cleanup (Script.AsCleanup: a release) behind
// the first of them. A release of a value whose SET was refused ran before that SET: it
// must run again after it (compare-and-delete may be repeated), or the retried SET would
// stand for a ttl.
func noScriptRetry(calls []*call) []*call {
	var out []*call
	seen := false
	for _, c := range calls {
		ns := isNoScript(c.reply.Err())
		seen = seen || ns
		if ns || (seen && c.cmd.script != nil && c.cmd.script.cleanup) {
			out = append(out, c)
		}
	}
	return out
}

// close fails the calls still queued and every later one: the node is closing.
func (b *batcher) close(err error) {
	b.mu.Lock()
	q := b.queue
	b.queue, b.closed = nil, true
	b.mu.Unlock()
	for _, c := range q {
		c.fail(err)
	}
}

// deadlineCtx is a batch's context: its parent's values and cancellation with the
// batch's deadline, which go-redis turns into the connection's read and write deadlines
// (Options.ContextTimeoutEnabled). Nothing waits for the deadline on Done: unlike
// context.WithDeadline it needs no timer, child registration or cancel per batch.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }
