package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// MaxKeys caps the keys AcquireAll takes together.
const MaxKeys = 16

// AcquireAll takes several keys together, all or none, with the options of Acquire (the
// same mode for every key). The keys are sorted and duplicates merged, and they are taken
// one by one in that order: two callers whose key sets overlap wait for each other in the
// same order, so they cannot deadlock (A->B against B->A). o.Wait bounds the whole call.
// On any failure the keys already taken are released and the error is Acquire's for the
// key that failed (a *BusyError names it). The locks come back in that sorted order;
// renew each (KeepAlive), watch each (any one lost means the set is lost) and release
// each.
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
	deadline := time.Now().Add(o.Wait)
	held := make([]*Lock, 0, len(keys))
	for _, k := range keys {
		ko := o
		ko.Wait = max(time.Until(deadline), 0)
		l, err := c.Acquire(ctx, k, ko)
		if err != nil {
			releaseAll(context.WithoutCancel(ctx), held)
			return nil, err
		}
		held = append(held, l)
	}
	return held, nil
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
