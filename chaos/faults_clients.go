package main

import (
	"context"
	"fmt"
	"time"
)

// clientsGoneFault: every client disconnects at once, in the middle of its request
// (waits, holds, streams), and the load starts again right away. A request cut short
// while the upstream works on it keeps its lock for one more ttl (draining): the next
// holder must not enter the upstream while the upstream still runs the old request.
func clientsGoneFault(times int) fault {
	return fault{name: fmt.Sprintf("8 all clients vanish mid-request x%d", times), run: func(ctx context.Context, e *env) outcome {
		var o outcome
		o.start = time.Now()
		for i := 0; i < times && ctx.Err() == nil; i++ {
			sleep(ctx, e.cfg.streamMax) // streams in full swing
			e.ld.stop()
			e.ld.start(ctx)
		}
		o.end = time.Now()
		o.notef("all %d client loops cut %d times mid-request and restarted", e.cfg.clients+e.cfg.streamers+e.cfg.modeClients, times)
		return o
	}}
}
