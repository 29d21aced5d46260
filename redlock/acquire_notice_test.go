package redlock

import (
	"testing"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// A release publishes its notice on every node, and the copies arrive one after the
// other. A waiter woken by the first copy takes the next wake-up (next) and tries at
// once; when its try reaches some nodes before the release's delete does, it is refused
// there, and only a later copy says the key is free on them. That copy must wake it
// again: dropping it as an echo of the first left the waiter asleep for a whole retry
// delay (TestSharedReadersGoBeforeOtherClientsWriter failed about one run in eight: the
// other client's writer got in first).
func TestEveryNoticeCopyWakesAWaiterThatTriedSince(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	ch := c.names("k").channel
	w := c.notices.watch(ch)
	defer w.unwatch()
	first := w.next()
	c.notices.poke(ch) // the first node's copy
	select {
	case <-first:
	default:
		t.Fatal("the first copy did not wake the waiter")
	}
	again := w.next()  // the waiter's next try begins
	c.notices.poke(ch) // a second node's copy, an instant later
	select {
	case <-again:
	default:
		t.Fatal("a copy that came while the waiter tried again was dropped: it sleeps a retry delay")
	}
}
