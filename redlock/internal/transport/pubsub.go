package transport

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Subscription is one node's subscriber connection for release notices: channels are
// added and removed as keys start and stop being awaited, without blocking the caller
// (a dead node must not stall an acquire or a release). What a notice means, and who
// wakes, is the owner's (redlock's notifier).
type Subscription struct {
	n       *Node
	ps      *redis.PubSub
	mu      sync.Mutex
	pending []subOp
	wake    chan struct{}
}

type subOp struct {
	subscribe bool
	channel   string
}

// Notice is what a subscriber connection hears: a message on a channel, or
// (Subscribed) the node's confirmation that a channel is subscribed.
type Notice struct {
	Channel    string
	Payload    string // the message; "" for a confirmation
	Subscribed bool
}

// Subscribe opens the node's subscriber connection (go-redis dials it on the first
// SUBSCRIBE, and re-subscribes every channel it knows of when it reconnects). ctx bounds
// the connection's life. Its owner runs Apply and Listen on goroutines of their own and
// ends them with ctx and Close.
func (n *Node) Subscribe(ctx context.Context) *Subscription {
	return &Subscription{n: n, ps: n.client.Subscribe(ctx), wake: make(chan struct{}, 1)}
}

// Add queues SUBSCRIBE channel; Apply sends it.
func (s *Subscription) Add(channel string) { s.enqueue(subOp{subscribe: true, channel: channel}) }

// Remove queues UNSUBSCRIBE channel; Apply sends it.
func (s *Subscription) Remove(channel string) { s.enqueue(subOp{channel: channel}) }

func (s *Subscription) enqueue(op subOp) {
	s.mu.Lock()
	s.pending = append(s.pending, op)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Apply sends the queued SUBSCRIBE and UNSUBSCRIBE commands in order, off the callers'
// paths, until ctx ends. A failure is recorded as "subscribe" (rtt 0).
func (s *Subscription) Apply(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		ops := s.pending
		s.pending = nil
		s.mu.Unlock()
		for _, op := range ops {
			opCtx, cancel := context.WithTimeout(ctx, time.Second)
			var err error
			if op.subscribe {
				err = s.ps.Subscribe(opCtx, op.channel)
			} else {
				err = s.ps.Unsubscribe(opCtx, op.channel)
			}
			cancel()
			if err != nil && ctx.Err() == nil {
				// go-redis re-subscribes every channel it knows of when it reconnects.
				s.n.Record("subscribe", 0, err)
			}
		}
	}
}

// Listen hands f every message and every subscribe confirmation, in order, on the
// caller's goroutine, until Close. f must not block for long: a notice stuck behind it
// is late, and go-redis drops messages once its buffer (1024) is full.
func (s *Subscription) Listen(f func(Notice)) {
	for msg := range s.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)) {
		switch m := msg.(type) {
		case *redis.Message:
			f(Notice{Channel: m.Channel, Payload: m.Payload})
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				f(Notice{Channel: m.Channel, Subscribed: true})
			}
		}
	}
}

// Close closes the subscriber connection, which ends Listen.
func (s *Subscription) Close() error { return s.ps.Close() }
