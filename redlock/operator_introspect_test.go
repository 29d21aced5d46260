package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

func TestInspectAndForceRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	holder := newTestClient(t, servers, fastOptions())
	other := newTestClient(t, servers, fastOptions())
	ctx := context.Background()

	st, err := other.Inspect(ctx, "inspect")
	if err != nil || st.Present != 0 || st.QuorumHeld {
		t.Fatalf("free key: %+v, %v", st, err)
	}
	l, err := holder.Acquire(ctx, "inspect", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool {
		st, err = holder.Inspect(ctx, "inspect")
		return err == nil && st.Present == 3
	}) {
		t.Fatal("timed out waiting for: all nodes hold the key")
	}
	if !st.QuorumHeld || !st.HeldHere {
		t.Fatalf("holder's view: %+v", st)
	}
	for _, n := range st.Nodes {
		if !n.Present || !n.Ours || n.PTTL <= 0 || n.PTTL > fastOptions().TTL {
			t.Fatalf("node view: %+v", n)
		}
	}
	st, _ = other.Inspect(ctx, "inspect")
	if !st.QuorumHeld || st.HeldHere {
		t.Fatalf("other's view: %+v", st)
	}
	if held := holder.Status().Held; len(held) != 1 || held[0].key != "inspect" || held[0].Info().Validity <= 0 {
		t.Fatalf("Status().Held = %+v", held)
	}

	// Force release by the holder's own client (the admin API of the instance that holds
	// it): keys gone everywhere and the local holder is told at once. A holder in another
	// process learns of it at its next renewal, if someone else has taken the key by then.
	res, err := holder.ForceRelease(ctx, "inspect")
	if err != nil || res.Deleted != 3 || res.Answered != 3 || len(res.Stopped) != 1 || res.Stopped[0].Key != "inspect" {
		t.Fatalf("force release: %+v, %v; want deleted on 3, the holder stopped", res, err)
	}
	for _, n := range res.Nodes {
		if !n.Deleted || n.Err != nil || n.Node == "" {
			t.Fatalf("force release per node: %+v", res.Nodes)
		}
	}
	select {
	case <-l.done.Done():
	default:
		t.Fatal("local holder not told of the force release")
	}
	var lost *LostError
	if !errors.As(l.err(), &lost) || lost.Reason != LostForceReleased {
		t.Fatalf("Err = %v", l.err())
	}
	for _, s := range servers {
		if _, present := rawGet(t, s, "inspect"); present {
			t.Fatalf("key still on %s", s.Addr())
		}
	}
	_ = l.Release(ctx)
	if held := holder.Status().Held; len(held) != 0 {
		t.Fatalf("Status().Held after release: %+v", held)
	}
}

func TestNodesReportHealth(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	// The run_id comes with each connection, Up and LastRTT with the first health check:
	// wait for that check, not for the run_ids.
	if !eventually(3*time.Second, func() bool {
		for _, s := range c.Status().Nodes {
			if !s.Checked {
				return false
			}
		}
		return true
	}) {
		t.Fatal("timed out waiting for: every node checked")
	}
	for _, s := range c.Status().Nodes {
		if !s.Up || s.LastRTT <= 0 {
			t.Fatalf("node not up: %+v", s)
		}
	}
	if err := servers[1].Pause(); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool { return !c.Status().Nodes[1].Up }) {
		t.Fatal("timed out waiting for: paused node shows down")
	}
	if err := servers[1].Resume(); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool { return c.Status().Nodes[1].Up }) {
		t.Fatal("timed out waiting for: resumed node shows up")
	}
	if err := servers[2].Restart(); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool {
		s := c.Status().Nodes[2]
		return s.Up && !s.QuarantinedUntil.IsZero() && s.QuarantinedUntil.After(time.Now())
	}) {
		t.Fatal("timed out waiting for: restarted node quarantined")
	}
}

// A client closed while it holds a lock (a config reload) keeps renewing it until it is
// released, refuses new acquires, and shuts down after the last release.
func TestCloseWhileHolding(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 700 * time.Millisecond
	opt.NodeTimeout = 200 * time.Millisecond
	c, err := New(redistest.URLs(servers), opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Acquire(ctx, "closing", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeepAlive(opt.TTL/3, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "other", AcquireOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after Close: %v", err)
	}
	select {
	case <-l.done.Done():
		t.Fatalf("lock lost after Close: %v", l.err())
	case <-time.After(3 * opt.TTL):
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after Close: %v", err)
	}
	for _, s := range servers {
		if _, present := rawGet(t, s, "closing"); present {
			t.Fatalf("key left on %s", s.Addr())
		}
	}
	if c.ctx.Err() == nil {
		t.Fatal("client did not shut down after the last release")
	}
}
