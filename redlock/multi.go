package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Several keys
//
// AcquireAll takes sorted, distinct keys one by one, each an ordinary lock of the
// requested mode, releasing those taken when one fails. Claim: no deadlock among callers,
// whatever key sets they ask for. A caller holding keys waits only for a key larger than
// every key it holds; in a cycle of callers each waiting for a key the next holds, the
// keys waited for would strictly increase around the cycle, which cannot close. (The wait
// also bounds each call.) Safety per key is each lock's own; the set is lost when any of
// its locks is, which the caller watches.
//
// Claim: every lock AcquireAll returns is held, with the validity Lock.Info reports. The
// wait for a later key may outlast the ttl, so the keys already taken are renewed
// meanwhile (renewer.renewWhileWaiting, the same batched renewals as KeepAlive) and the wait ends
// early when one of them is lost; a set with a lost lock is released whole and taken
// again while the wait lasts (TestAcquireAllKeepsEarlierKeysWhileWaitingLong,
// TestAcquireAllRetakesASetWhoseEarlierKeyWasLost). Its renewals stop when AcquireAll
// returns; the caller's KeepAlive continues from the last renewal.

// MaxKeys caps the keys AcquireAll takes together.
const MaxKeys = 16

// AcquireAll takes several keys together, all or none, with the options of Acquire (the
// same mode for every key). The keys are sorted and duplicates merged, and they are taken
// one by one in that order: two callers whose key sets overlap wait for each other in the
// same order, so they cannot deadlock (A->B against B->A). o.Wait bounds the whole call.
// The keys already taken are renewed while a later one is awaited (the wait may be longer
// than the ttl), and every lock returned is held, with the validity Lock.Info reports; if
// one of them was lost meanwhile (a node outage, a force release), all are given back
// and, while the wait lasts, taken again. On any failure the keys already taken are
// released and the error is Acquire's for the key that failed (a *BusyError names it).
// The locks come back in that sorted order; renew each (KeepAlive), watch each (any one
// lost means the set is lost) and release each.
func (c *Client) AcquireAll(ctx context.Context, keys []string, o AcquireOptions) ([]*Lock, error) {
	if len(keys) == 0 {
		return nil, errors.New("redlock: AcquireAll: no key")
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	if len(keys) > MaxKeys {
		return nil, fmt.Errorf("redlock: AcquireAll: %d keys, at most %d", len(keys), MaxKeys)
	}
	for _, k := range keys {
		if err := validateKey(k); err != nil {
			return nil, err
		}
	}
	if _, err := c.checkOptions(o); err != nil { // as Acquire: a negative wait is refused, not read as 0
		return nil, err
	}
	start := time.Now()
	deadline := start.Add(o.Wait)
	for {
		held, lost, err := c.acquireSet(ctx, keys, o, deadline)
		switch {
		case err != nil || lost == "":
			return held, err
		case !time.Now().Before(deadline):
			// Lost again after the wait ran out: as for a key still busy then.
			return nil, &BusyError{Key: lost, Waited: time.Since(start)}
		}
		// A lock taken early was lost while a later key was awaited: all were given
		// back; take the set again while the wait lasts.
	}
}

// acquireSet takes keys in order, renewing those taken while it waits for the next. It
// returns the set, or an error, or the key of a lock lost meanwhile (all given back).
func (c *Client) acquireSet(ctx context.Context, keys []string, o AcquireOptions, deadline time.Time) (held []*Lock, lost string, err error) {
	held = make([]*Lock, 0, len(keys))
	for i, k := range keys {
		ko := o
		ko.Wait = max(time.Until(deadline), 0)
		// The wait for this key ends early when a lock already taken is lost.
		wctx, stop := heldContext(ctx, held)
		l, err := c.acquire(wctx, k, ko, true)
		stop()
		if err != nil {
			c.stopAllWaitRenewals(held)
			lost := firstLost(held) // before the releases below end them all
			releaseAll(context.WithoutCancel(ctx), held)
			if lost != "" && ctx.Err() == nil {
				return nil, lost, nil
			}
			return nil, "", err
		}
		held = append(held, l)
		if i < len(keys)-1 {
			c.renewer.renewWhileWaiting(l, l.ttl/3) // the next key may be busy for longer than the ttl
		}
	}
	c.stopAllWaitRenewals(held[:len(held)-1]) // from here the caller's KeepAlive renews them
	if lost := firstLost(held); lost != "" {
		releaseAll(context.WithoutCancel(ctx), held)
		return nil, lost, nil
	}
	return held, "", nil
}

// heldContext is ctx, also cancelled when one of locks is lost.
func heldContext(ctx context.Context, locks []*Lock) (context.Context, context.CancelFunc) {
	cancels := make([]context.CancelFunc, len(locks))
	for i, l := range locks {
		ctx, cancels[i] = l.Context(ctx)
	}
	return ctx, func() {
		for _, c := range cancels {
			c()
		}
	}
}

// firstLost is the key of the first of locks that is no longer valid, or "".
func firstLost(locks []*Lock) string {
	for _, l := range locks {
		if l.validity() <= 0 {
			return l.key
		}
	}
	return ""
}

// stopAllWaitRenewals stops AcquireAll's own renewals of locks (renewer.renewWhileWaiting).
func (c *Client) stopAllWaitRenewals(locks []*Lock) {
	for _, l := range locks {
		c.renewer.stopWaitRenewals(l)
	}
}

// releaseAll releases locks at once (a failed AcquireAll's partial set).
func releaseAll(ctx context.Context, locks []*Lock) {
	done := make(chan struct{}, len(locks))
	for _, l := range locks {
		go func() {
			_ = l.Release(ctx)
			done <- struct{}{}
		}()
	}
	for range locks {
		<-done
	}
}
