package transport

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotAsked is what an OnAll function returns for a node it sends nothing to: OnAll
// neither records anything for it nor counts it as a yes or a no, and returns it (with
// the node's address) as that node's error.
var ErrNotAsked = errors.New("not asked")

// OnAll runs f on every node at once, each call bounded by its node's timeout and
// recorded as op, and returns as soon as need nodes said yes or that became impossible
// (need <= 0: when every node answered). Errors name their node. Replies still on the
// way finish on their own timeout into a buffered channel: with need > 0, f must not
// write anything the caller reads.
func OnAll(ctx context.Context, nodes []*Node, op string, need int,
	f func(ctx context.Context, i int) (bool, error)) (yes, no int, errs []error) {
	type reply struct {
		yes bool
		err error
	}
	replies := make(chan reply, len(nodes))
	for i, nd := range nodes {
		go func() {
			cctx, cancel := context.WithTimeout(ctx, nd.cfg.NodeTimeout)
			defer cancel()
			t0 := time.Now()
			ok, err := f(cctx, i)
			if !errors.Is(err, ErrNotAsked) {
				nd.Record(op, time.Since(t0), err)
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", nd.addr, err)
			}
			replies <- reply{ok, err}
		}()
	}
	for range nodes {
		r := <-replies
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.yes:
			yes++
		default:
			no++
		}
		if need > 0 && (yes >= need || no+len(errs) > len(nodes)-need) {
			break
		}
	}
	return yes, no, errs
}
