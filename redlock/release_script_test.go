package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The release script makes the key's release channel itself (channelSuffixLua): a
// subscriber to the name a client watches (names.channel) gets the notice, with the
// releasing client's id; a release of another value neither deletes nor notifies; a
// place of a limited key is given the key's channel.
func TestReleaseNoticeOnTheKeysChannel(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	tn := scriptNode(t, srv)
	ctx := context.Background()
	nm := (&Client{opt: Options{Prefix: defaultPrefix}}).names("k")
	sub := rc.Subscribe(ctx, nm.channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	if err := rc.Set(ctx, nm.lock, "v1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := releaseScript.Run(ctx, tn, []string{nm.lock}, "other", "id").Int64(); err != nil || n != 0 {
		t.Fatalf("release of another value: %d %v, want 0", n, err)
	}
	if n, err := releaseScript.Run(ctx, tn, []string{nm.lock}, "v1", "client-id").Int64(); err != nil || n != 2 {
		t.Fatalf("release: %d %v, want 2 (deleted, one subscriber)", n, err)
	}
	msg, err := sub.ReceiveTimeout(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := msg.(*redis.Message); !ok || m.Channel != nm.channel || m.Payload != "client-id" {
		t.Fatalf("notice %#v, want client-id on %q", msg, nm.channel)
	}
	if n, _ := rc.Exists(ctx, nm.lock).Result(); n != 0 {
		t.Fatal("the key is still there")
	}
	// A place of a limited key notifies on the key's channel, given as ARGV[3].
	place := (&Client{opt: Options{Prefix: defaultPrefix}}).slotNames("k", 2)[1]
	if err := rc.Set(ctx, place.lock, "v2", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := releaseScript.Run(ctx, tn, []string{place.lock}, "v2", "client-id", place.channel).Int64(); err != nil || n != 2 {
		t.Fatalf("release of a place: %d %v, want 2 (deleted, one subscriber)", n, err)
	}
	if msg, err := sub.ReceiveTimeout(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	} else if m, ok := msg.(*redis.Message); !ok || m.Channel != nm.channel {
		t.Fatalf("place's notice %#v, want it on the key's channel %q", msg, nm.channel)
	}
}

// A writer's release gives readers that marked themselves as waiting their turn (the
// mark becomes "t", then lapses with the turn); one taken with NoReaders does not look
// for the mark: it keeps the turn the reader asked for, and the reader still gets the key
// once it is free.
func TestNoReadersReleaseGivesNoTurn(t *testing.T) {
	for _, noReaders := range []bool{false, true} {
		servers := redistest.StartN(t, 3)
		w := newTestClient(t, servers, notifyOptions())
		r := newTestClient(t, servers, notifyOptions())
		ctx := context.Background()
		held := mustAcquire(t, w, "doc", AcquireOptions{NoReaders: noReaders})
		got := make(chan error, 1)
		go func() {
			l, err := r.Acquire(ctx, "doc", AcquireOptions{Shared: true, Wait: 5 * time.Second})
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		nm := w.names("doc")
		marks := func(want func(string) bool) bool {
			n := 0
			for _, s := range servers {
				rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
				v, _ := rc.Get(ctx, nm.turn).Result()
				rc.Close()
				if want(v) {
					n++
				}
			}
			return n >= 2
		}
		if !eventually(5*time.Second, func() bool {
			return marks(func(v string) bool { return v != "" && v != "t" })
		}) {
			t.Fatal("the refused reader's mark never reached a majority")
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("noReaders %v: reader: %v", noReaders, err)
		}
		// The turn turned the mark into "t" for the turn's length (then it lapses); without
		// one the reader's ask stays for the mark's own life (writerMarkTTL: seconds).
		asked := marks(func(v string) bool { return v != "" && v != "t" })
		if asked != noReaders {
			t.Errorf("noReaders %v: the readers' mark still asks for a turn: %v", noReaders, asked)
		}
	}
}
