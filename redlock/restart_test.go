package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Two nodes of three restart without persistence while A holds the key. Were they to
// vote at once, B would win them and two clients would hold the key. The delayed-restart
// rule keeps them out until ttl + drift has passed, by which time A's lock has lapsed.
func TestRestartedNodesDoNotVoteDuringQuarantine(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 1500 * time.Millisecond
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	waitRunIDs(t, b)
	ctx := context.Background()
	la, err := a.Acquire(ctx, "restart", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[:2] {
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = b.Acquire(ctx, "restart", AcquireOptions{})
	if err == nil {
		t.Fatal("B acquired while A's lock was still valid: restarted nodes voted")
	}
	if la.Validity() > 0 && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrBusy) {
		t.Fatalf("unexpected error: %v", err)
	}
	// Both restarts are seen (by a new connection or the next health check) and quarantined.
	eventually(t, "two nodes quarantined", func() bool {
		q := 0
		for _, s := range b.Nodes() {
			if !s.QuarantinedUntil.IsZero() {
				q++
			}
		}
		return q == 2
	})
	if _, err := b.Acquire(ctx, "restart", AcquireOptions{}); err == nil && la.Validity() > 0 {
		t.Fatal("B acquired during the quarantine while A's lock was valid")
	}
	// After the quarantine the nodes vote again and B gets the key. Wait for the end of
	// the quarantine the client reports, not for a fixed time: it starts when the restart
	// is first seen, which is as late as B's first acquire after it.
	var end time.Time
	for _, s := range b.Nodes() {
		if s.QuarantinedUntil.After(end) {
			end = s.QuarantinedUntil
		}
	}
	time.Sleep(time.Until(end) + 10*time.Millisecond)
	lb, err := b.Acquire(ctx, "restart", AcquireOptions{Wait: 3 * opt.TTL})
	if err != nil {
		t.Fatalf("after quarantine: %v", err)
	}
	_ = lb.Release(ctx)
}
