package redlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// onAll runs f on every node at once (skipping those marked in skip), each bounded by
// node_timeout, and returns as soon as need nodes said yes or that became impossible (need <= 0: wait for all).
// Replies still on the way finish on their own timeout into a buffered channel.
func (c *Client) onAll(ctx context.Context, op string, skip []bool,
	f func(context.Context, *node) (bool, error), need int) (yes, no int, errs []error) {
	type reply struct {
		yes bool
		err error
	}
	replies := make(chan reply, len(c.nodes))
	sent := 0
	for i, nd := range c.nodes {
		if skip != nil && skip[i] {
			continue
		}
		sent++
		go func() {
			cctx, cancel := context.WithTimeout(ctx, c.opt.NodeTimeout)
			defer cancel()
			t0 := time.Now()
			ok, err := f(cctx, nd)
			nd.record(op, time.Since(t0), err)
			if err != nil {
				err = fmt.Errorf("%s: %w", nd.addr, err)
			}
			replies <- reply{ok, err}
		}()
	}
	for i := 0; i < sent; i++ {
		r := <-replies
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.yes:
			yes++
		default:
			no++
		}
		if need > 0 && (yes >= need || no+len(errs) > sent-need) {
			break
		}
	}
	return yes, no, errs
}

// releaseOnNodes runs compare-and-delete (plus the release notice) on every node not
// skipped and waits for all of them (bounded by node_timeout). It returns how many nodes
// deleted our value, whether the notice reached another client's waiters on any node
// (subscribed: this client listens on the key's channel itself, so one receiver is ours),
// and the errors.
func (c *Client) releaseOnNodes(ctx context.Context, nm names, value string, skip []bool, subscribed bool) (int, bool, []error) {
	own := int64(0)
	if subscribed {
		own = 1
	}
	type reply struct {
		deleted bool
		err     error
	}
	replies := make(chan reply, len(c.nodes)) // buffered: deliveries never block
	var others atomic.Bool
	sent := 0
	for i, nd := range c.nodes {
		if skip != nil && skip[i] {
			continue
		}
		sent++
		t0 := time.Now()
		nd.call(ctx, func(cmd *redis.Cmd) {
			r, err := cmd.Int64()
			nd.record("release", time.Since(t0), err)
			if err != nil {
				err = fmt.Errorf("%s: %w", nd.addr, err)
			}
			// r = 1 + receivers when deleted. Where our own subscription is not confirmed
			// this undercounts, never overcounts: a yield is never made up.
			if r-1-own > 0 {
				others.Store(true)
			}
			replies <- reply{r >= 1, err}
		}, releaseScript, []string{nm.lock}, value, nm.channel, c.id)
	}
	deleted := 0
	var errs []error
	for range sent {
		r := <-replies
		if r.err != nil {
			errs = append(errs, r.err)
		} else if r.deleted {
			deleted++
		}
	}
	return deleted, others.Load(), errs
}
