package redlock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Data loss without a restart. A node can lose keys while its run_id stays the same
// (FLUSHALL or FLUSHDB, eviction under memory pressure, a failover behind one address
// that keeps the run_id, a proxy that hides INFO) or report no run_id at all (Dragonfly):
// the restart rule alone would let it vote with locks it forgot. So every node keeps a
// data marker under the prefix (markerName): a random value and the node's clock when it
// was created, written by the first client to find it absent and kept alive (PEXPIRE) by
// every client's announce, on every new connection and every health check
// (announceScript). A client that finds the marker gone (re-created) or changed since
// its last reading, or INFO's evicted_keys grown, saw the node lose keys: it quarantines
// it exactly like a restarted node (voting.go, QuarantineDataLoss). A client meeting a node
// for the first time reads the marker's age as it reads INFO's uptime: data that began
// less than a quarantine ago is young.
//
// What it does not cover: a loss between two health checks is seen at the next one (a
// restart, by contrast, breaks the connections and is seen before the first command on
// a new one), so a lock taken in that window may count the node's vote; a majority losing
// data at once (a fresh start; Redlock without persistence cannot survive it).

// markerName follows the prefix directly, like boundName: no lock key is empty.
const markerName = "\x00data_marker"

func (c *Client) markerKey() string { return c.opt.Prefix + markerName }

// marker is a node's answer to announceScript.
type marker struct {
	bound int64         // the bound stored, ms
	value string        // the marker's value (random:created_ms)
	age   time.Duration // how long ago the node created it, by its own clock
}

// parseMarker reads announceScript's reply {bound_ms, marker, now_ms}.
func parseMarker(cmd *redis.Cmd) (marker, error) {
	if cmd == nil {
		return marker{}, errors.New("no announce reply")
	}
	vals, err := cmd.Slice()
	if err != nil {
		return marker{}, err
	}
	if len(vals) != 3 {
		return marker{}, fmt.Errorf("announce reply of %d items, want 3", len(vals))
	}
	bound, ok1 := vals[0].(int64)
	value, ok2 := vals[1].(string)
	now, ok3 := vals[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return marker{}, errors.New("announce reply of the wrong types")
	}
	m := marker{bound: bound, value: value}
	if _, created, ok := strings.Cut(value, ":"); ok {
		if ms, err := strconv.ParseInt(created, 10, 64); err == nil && now >= ms {
			m.age = time.Duration(now-ms) * time.Millisecond
		}
	}
	return m, nil
}
