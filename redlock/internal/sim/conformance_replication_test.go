package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestConformanceReplication holds what the simulated failover (replication.go) assumes
// to a real redis-server with a real replica: the replica holds the master's keys with
// their expiries (absolute: a lock's remaining ttl carries over), its own run_id; INFO
// replication says role, connected_slaves, master_replid and master_repl_offset on a
// master, the simulated node's too; REPLICAOF NO ONE answers OK, on a replica it promotes
// (role master, a new replication id, the same run_id: the process did not restart) and
// on a master it changes nothing, as on the simulated node.
func TestConformanceReplication(t *testing.T) {
	master := redistest.StartN(t, 1)[0]
	replica := redistest.StartN(t, 1, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", portOf(master.Addr())}})[0]
	ctx := context.Background()
	mc := redis.NewClient(&redis.Options{Addr: master.Addr(), Protocol: 2, DisableIdentity: true})
	defer mc.Close()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr(), Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	if err := mc.Set(ctx, "redlock:k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// Replicated: wait (bounded) until the replica has the key.
	deadline := time.Now().Add(10 * time.Second)
	for rc.Get(ctx, "redlock:k").Val() != "v" {
		if time.Now().After(deadline) {
			t.Fatalf("the replica never got the key: %s", rc.Info(ctx, "replication").Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pttl := mc.PTTL(ctx, "redlock:k").Val() - rc.PTTL(ctx, "redlock:k").Val(); pttl < -time.Second || pttl > time.Second {
		t.Errorf("the replica's PTTL differs from the master's by %v: want the same expiry", pttl)
	}
	minfo, rinfo := mc.Info(ctx).Val(), rc.Info(ctx).Val()
	if infoField(rinfo, "role") != "slave" || infoField(minfo, "role") != "master" {
		t.Fatalf("roles: master %q, replica %q", infoField(minfo, "role"), infoField(rinfo, "role"))
	}
	if infoField(minfo, "run_id") == infoField(rinfo, "run_id") {
		t.Error("the replica has the master's run_id: a promotion behind one address would not change it")
	}
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	pinfo := rc.Info(ctx).Val()
	if infoField(pinfo, "role") != "master" {
		t.Errorf("promoted: role %q", infoField(pinfo, "role"))
	}
	if infoField(pinfo, "run_id") != infoField(rinfo, "run_id") {
		t.Error("a promotion changed the replica's run_id")
	}
	if infoField(pinfo, "master_replid") == infoField(minfo, "master_replid") {
		t.Error("the promoted replica kept the old master's replication id")
	}
	if rc.Get(ctx, "redlock:k").Val() != "v" {
		t.Error("the promoted replica lost the key")
	}
	// The simulated node, a master, against the promoted replica and the master.
	sim := NewServer("sim", func() int64 { return time.Now().UnixMicro() }, strings.Repeat("ab", 20))
	sess := sim.NewSession()
	for _, real := range []string{pinfo, minfo} {
		got := sess.Exec([]string{"info"})[0]
		if msg := agree([]string{"info"}, reply{kind: '$', s: real}, got, time.Second); msg != "" {
			t.Errorf("INFO: %s\n  redis-server: %q\n  simulated: %q", msg, real, got.s)
		}
		if infoField(got.s, "role") != "master" {
			t.Errorf("simulated role %q", infoField(got.s, "role"))
		}
	}
	for _, args := range [][]string{{"replicaof", "no", "one"}, {"replicaof", "no"}} {
		real := toReply(mc.Do(ctx, toAny(args)...).Result())
		got := sess.Exec(args)[0]
		if msg := agreeValue(real, got, time.Second); msg != "" && !(real.kind == '-' && got.kind == '-') {
			t.Errorf("%v: %s\n  redis-server: %s\n  simulated:    %s", args, msg, real, got)
		}
	}
	if infoField(mc.Info(ctx).Val(), "role") != "master" {
		t.Error("REPLICAOF NO ONE changed a master")
	}
}

func portOf(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }
