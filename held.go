package caddyredlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// This file holds a request's locks as one value (heldLocks): taking them, and renewing,
// watching, handing over and releasing them together, as the handler needs them whether
// the request has one key or several.

// acquire takes the request's keys: one, or several all together (redlock.AcquireAll:
// sorted order, all or nothing).
func acquire(ctx context.Context, c *redlock.Client, keys []string, o redlock.AcquireOptions) (heldLocks, error) {
	if len(keys) == 1 {
		l, err := c.Acquire(ctx, keys[0], o)
		if err != nil {
			return nil, err
		}
		return heldLocks{l}, nil
	}
	return c.AcquireAll(ctx, keys, o)
}

// heldLocks are the locks of one request, in lock order: they are renewed, watched and
// released together, and the request is lost when any one of them is.
type heldLocks []*redlock.Lock

// attempts is how many rounds the acquire took (the most of any key).
func (hl heldLocks) attempts() int {
	n := 0
	for _, l := range hl {
		n = max(n, l.Info().Attempts)
	}
	return n
}

// waited reports whether any key was found held and waited for.
func (hl heldLocks) waited() bool {
	for _, l := range hl {
		if l.Info().Waited {
			return true
		}
	}
	return false
}

// keepAlive starts renewing every lock; the first error stops (the caller releases all).
func (hl heldLocks) keepAlive(interval, maxHold time.Duration) error {
	for _, l := range hl {
		if err := l.KeepAlive(interval, maxHold); err != nil {
			return err
		}
	}
	return nil
}

// fencingHeader is the fencing header's value: the token for one key; for several,
// key=token pairs in lock order, comma-separated, each key percent-encoded
// (headerKey), so that a "," or "=" in a path capture can never forge a pair.
func (hl heldLocks) fencingHeader() string {
	if len(hl) == 1 {
		return strconv.FormatInt(hl[0].Token(), 10)
	}
	keys, tokens := make([]string, len(hl)), make([]int64, len(hl))
	for i, l := range hl {
		keys[i], tokens[i] = l.Info().Key, l.Token()
	}
	return fencingPairs(keys, tokens)
}

// fencingPairs is the several-keys header: encoded key=token pairs, comma-separated.
func fencingPairs(keys []string, tokens []int64) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = headerKey(k) + "=" + strconv.FormatInt(tokens[i], 10)
	}
	return strings.Join(parts, ",")
}

// headerKey percent-encodes a key for the several-keys fencing header: every byte but
// visible ASCII, and the four that would change how the header reads ("," and "=" the
// format's own, "%" the escape, "+" which form decoders read as a space), become %XX. Any
// standard percent-decoder gives the key back (Go's url.PathUnescape or QueryUnescape,
// Python's unquote, JavaScript's decodeURIComponent), and a key without those bytes is
// sent as it is. (An RFC 8941 dictionary would not do: its keys are lowercase tokens, so
// every lock key would change form, and no standard library of Go or Python parses it.)
func headerKey(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		if c := key[i]; c > ' ' && c < 0x7f && c != ',' && c != '=' && c != '%' && c != '+' {
			b.WriteByte(c)
		} else {
			b.Write([]byte{'%', hex[c>>4], hex[c&15]})
		}
	}
	return b.String()
}

// err is nil while every lock is held, else the first lost lock's *LostError, else
// ErrReleased (as in redlock.LockInfo.Err).
func (hl heldLocks) err() error {
	var released error
	for _, l := range hl {
		if err := l.Info().Err; isLost(err) {
			return err
		} else if err != nil && released == nil {
			released = err
		}
	}
	return released
}

// renewals is the fewest renewals of any lock: the request's locks renew together.
func (hl heldLocks) renewals() int {
	n := -1
	for _, l := range hl {
		if r := l.Info().Renewals; n < 0 || r < n {
			n = r
		}
	}
	return max(n, 0)
}

// validity is the least validity left of any lock.
func (hl heldLocks) validity() time.Duration {
	v := hl[0].Info().Validity
	for _, l := range hl[1:] {
		v = min(v, l.Info().Validity)
	}
	return v
}

// fencing reports whether the locks carry fencing tokens.
func (hl heldLocks) fencing() bool { return hl[0].Token() != 0 }

// handOver passes a lone lock to this instance's next request for its key (Lock.HandOver).
// Several keys are released in Redis: handing a set on would need a waiter for exactly
// the same set.
func (hl heldLocks) handOver() bool {
	return len(hl) == 1 && hl[0].HandOver()
}

// release releases every lock at once and joins their errors (ErrReleased only if every
// one was released already).
func (hl heldLocks) release(ctx context.Context) error {
	if len(hl) == 1 {
		return hl[0].Release(ctx)
	}
	errs := make([]error, len(hl))
	var wg sync.WaitGroup
	for i, l := range hl {
		wg.Go(func() { errs[i] = l.Release(ctx) })
	}
	wg.Wait()
	released := 0
	for i, err := range errs {
		if errors.Is(err, redlock.ErrReleased) {
			released++
			errs[i] = nil
		}
	}
	if released == len(hl) {
		return redlock.ErrReleased
	}
	return errors.Join(errs...)
}

// context returns a copy of parent cancelled the moment any of the locks is lost, with
// that lock's *redlock.LostError as its cause (redlock.Lock.Context). The redlock package
// has the same unexported helper (heldContext, for AcquireAll's wait) and exports none.
func (hl heldLocks) context(parent context.Context) (context.Context, context.CancelFunc) {
	if len(hl) == 1 { // most requests: no slice of cancels, no closure over it
		return hl[0].Context(parent)
	}
	ctx := parent
	cancels := make([]context.CancelFunc, len(hl))
	for i, l := range hl {
		ctx, cancels[i] = l.Context(ctx)
	}
	return ctx, func() {
		for _, c := range cancels {
			c()
		}
	}
}

// isUnavailable reports whether err says too few Redis nodes answered.
func isUnavailable(err error) bool {
	_, ok := errors.AsType[*redlock.UnavailableError](err)
	return ok
}

// isLost reports whether err says a lock is gone for good. The redlock package has its
// own, unexported: the plugin needs it for LockInfo.Err and renewal errors.
func isLost(err error) bool {
	_, ok := errors.AsType[*redlock.LostError](err)
	return ok
}
