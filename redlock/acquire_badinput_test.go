package redlock

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

func TestBadInput(t *testing.T) {
	good := []string{"redis://127.0.0.1:1"}
	cases := []struct {
		name string
		urls []string
		opt  Options
		want string
	}{
		{"no nodes", nil, Options{}, "at least one node"},
		{"bad scheme", []string{"http://x:1"}, Options{}, "node URL"},
		{"no port", []string{"localhost"}, Options{}, "want redis://host:port"},
		{"skip_verify in the URL", []string{"rediss://127.0.0.1:1?skip_verify=true"}, Options{}, "skip_verify in the URL is not accepted"},
		{"empty url", []string{""}, Options{}, "empty node URL"},
		{"negative ttl", good, Options{TTL: -time.Second}, "ttl: must be > 0"},
		{"timeout over ttl", good, Options{TTL: time.Second, NodeTimeout: 2 * time.Second}, "node_timeout"},
		{"drift", good, Options{DriftFactor: 0.7}, "drift_factor"},
		{"drift NaN", good, Options{DriftFactor: math.NaN()}, "drift_factor"}, // every range check passes a NaN
		{"retry order", good, Options{RetryDelayMin: time.Second, RetryDelayMax: time.Millisecond}, "retry_delay"},
		{"no validity left", good, Options{TTL: 100 * time.Millisecond, NodeTimeout: 99 * time.Millisecond}, "leaves no validity"},
		{"prefix with NUL", good, Options{Prefix: "a\x00b"}, "prefix"},
		{"password hidden", []string{"redis://u:secret@:bad:port"}, Options{}, "node URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.urls, tc.opt)
			if err == nil {
				c.Close()
				t.Fatalf("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("error shows a password: %v", err)
			}
		})
	}

	servers := redistest.StartN(t, 1)
	c := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	if _, err := c.Acquire(ctx, "", AcquireOptions{}); err == nil || !strings.Contains(err.Error(), "empty key") {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := c.Acquire(ctx, "a\x00b", AcquireOptions{}); err == nil {
		t.Fatal("NUL in key accepted")
	}
	if _, err := c.Acquire(ctx, "k", AcquireOptions{TTL: -1}); err == nil {
		t.Fatal("negative ttl accepted")
	}
	if _, err := c.Acquire(ctx, "k", AcquireOptions{Wait: -1}); err == nil {
		t.Fatal("negative wait accepted")
	}
	l, err := c.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeepAlive(c.opt.TTL, 0); err == nil || !strings.Contains(err.Error(), "renew interval") {
		t.Fatalf("renew interval >= ttl: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != ErrReleased {
		t.Fatalf("second release: %v", err)
	}
}

func TestWarnings(t *testing.T) {
	c, err := New([]string{"127.0.0.1:1", "127.0.0.1:1"}, Options{HealthInterval: -1})
	if err == nil {
		c.Close()
		t.Fatal("negative health interval accepted")
	}
	c, err = New([]string{"127.0.0.1:1", "127.0.0.1:1"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeForGood(c)
	w := strings.Join(c.Status().Warnings, "\n")
	if !strings.Contains(w, "more than once") || !strings.Contains(w, "even count") {
		t.Fatalf("warnings = %q", w)
	}
}
