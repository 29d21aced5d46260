package caddyredlock

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"go.uber.org/zap"

	"github.com/caddy-redlock/caddy-redlock/internal/redact"
	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// Caddy events (docs/events.md), emitted through Caddy's events app with the handler
// module as origin, so that `events { on lock_lost exec ... }` and any events handler
// can react. Each locker (lockers.go) owns an eventQueue: events are emitted once per
// transition per locker, however many handlers share it, and never on a request's path:
// Caddy's Emit runs the subscribed handlers synchronously, so the queue's one goroutine
// runs them, and a full queue drops events (logged) rather than pile up goroutines or
// block a request or a health check.

// Event names.
const (
	eventLockLost        = "lock_lost"
	eventNodeDown        = "node_down"
	eventNodeUp          = "node_up"
	eventNodeQuarantined = "node_quarantined"
)

// eventQueueLen bounds the events waiting for a slow events handler.
const eventQueueLen = 64

// eventQueue emits one locker's events from a goroutine of its own, until stop.
type eventQueue struct {
	name string // the locker's name, the `name` field of every event
	ch   chan queuedEvent
	done chan struct{}
	stop func()

	mu sync.Mutex
	// targets are the live handlers using the locker, in provision order: events go
	// through the newest one's events app and context (its config's subscriptions; the
	// handler module as origin). A reload adds the new config's handlers before the old
	// ones leave.
	targets []emitTarget

	dropping atomic.Bool // a drop was logged and the queue has not drained since
}

type queuedEvent struct {
	name string
	data map[string]any
}

type emitTarget struct {
	owner *Handler
	ctx   caddy.Context
	app   *caddyevents.App
}

func newEventQueue(name string) *eventQueue {
	q := &eventQueue{name: name, ch: make(chan queuedEvent, eventQueueLen), done: make(chan struct{})}
	q.stop = sync.OnceFunc(func() { close(q.done) })
	go q.run()
	return q
}

func (q *eventQueue) run() {
	for {
		select {
		case <-q.done:
			return
		case ev := <-q.ch:
			q.deliver(ev)
			if len(q.ch) == 0 {
				q.dropping.Store(false)
			}
		}
	}
}

func (q *eventQueue) deliver(ev queuedEvent) {
	q.mu.Lock()
	var t emitTarget
	ok := len(q.targets) > 0
	if ok {
		t = q.targets[len(q.targets)-1]
	}
	q.mu.Unlock()
	if !ok || t.ctx.Err() != nil {
		return // no config to emit in (all handlers gone, or the config is being unloaded)
	}
	ev.data["name"] = q.name
	t.app.Emit(t.ctx, ev.name, ev.data)
}

// emit queues an event; it never blocks. data must not be used by the caller after.
func (q *eventQueue) emit(name string, data map[string]any) {
	select {
	case q.ch <- queuedEvent{name: name, data: data}:
	default:
		if q.dropping.CompareAndSwap(false, true) {
			pluginLog().Warn("redlock events handler too slow: events dropped",
				zap.String("name", q.name), zap.String("event", name), zap.Int("queued", eventQueueLen))
		}
	}
}

// eventsApp returns the config's events app. A context that belongs to no config (a
// handler provisioned outside Caddy's config loading, as some tests and embedders do)
// makes caddy.Context.App panic: then there is nowhere to emit, and events are off.
func eventsApp(ctx caddy.Context) (app *caddyevents.App, err error) {
	defer func() {
		if recover() != nil {
			app, err = nil, nil
		}
	}()
	a, err := ctx.App("events")
	if err != nil {
		return nil, fmt.Errorf("getting the events app: %w", err)
	}
	app, _ = a.(*caddyevents.App)
	return app, nil
}

// attach makes h's config a place to emit the locker's events; detach undoes it.
func (q *eventQueue) attach(h *Handler, ctx caddy.Context, app *caddyevents.App) {
	q.mu.Lock()
	q.targets = append(q.targets, emitTarget{owner: h, ctx: ctx, app: app})
	q.mu.Unlock()
}

func (q *eventQueue) detach(h *Handler) {
	q.mu.Lock()
	for i, t := range q.targets {
		if t.owner == h {
			q.targets = append(q.targets[:i:i], q.targets[i+1:]...)
			break
		}
	}
	q.mu.Unlock()
}

// lockerObserver is one locker's redlock.Observer and redlock.HealthObserver: it counts
// node calls and renewals under the locker's name, and turns node transitions into
// events.
type lockerObserver struct {
	name   string
	events *eventQueue
}

var _ redlock.HealthObserver = (*lockerObserver)(nil)

func (o *lockerObserver) NodeCall(node, op string, rtt time.Duration, err error) {
	nodeCalls.record(o.name, node, op, rtt, err)
}

func (o *lockerObserver) Renewal(err error) { countRenewal(o.name, err) }

func (o *lockerObserver) NodeDown(node, problem string) {
	o.events.emit(eventNodeDown, map[string]any{"node": redact.URL(node), "error": problem})
}

func (o *lockerObserver) NodeUp(node string) {
	o.events.emit(eventNodeUp, map[string]any{"node": redact.URL(node)})
}

func (o *lockerObserver) NodeQuarantined(node string, until time.Time, cause redlock.QuarantineCause) {
	o.events.emit(eventNodeQuarantined, map[string]any{"node": redact.URL(node), "until": until, "cause": string(cause)})
}

// lockLostEvent queues lock_lost for a request's lost lock.
func (h *Handler) lockLostEvent(e *inflight, le *redlock.LostError) {
	h.locker.pooled.events.emit(eventLockLost, map[string]any{"key": le.Key, "mode": e.mode,
		"reason": string(le.Reason), "held_ms": e.heldFor().Milliseconds()})
}
