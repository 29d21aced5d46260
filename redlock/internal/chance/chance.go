// Package chance is the lock's source of random choices that shape timing only (a retry's
// jitter, the first place a limited key's waiter tries): math/rand/v2 by default. The
// simulation (redlock/internal/sim) sets a seeded source for the length of a schedule,
// so that a seed replays the same choices; no value a lock's safety rests on comes from
// here (values and tokens come from crypto/rand and the clocks).
package chance

import (
	"math/rand/v2"
	"sync/atomic"
)

var src atomic.Pointer[func(n uint64) uint64]

// N returns a number in [0, n), n > 0.
func N[T ~int | ~int64](n T) T {
	if f := src.Load(); f != nil {
		return T((*f)(uint64(n)))
	}
	return rand.N(n)
}

// Set makes f the source until restore is called (one at a time per process).
func Set(f func(n uint64) uint64) (restore func()) {
	src.Store(&f)
	return func() { src.Store(nil) }
}
