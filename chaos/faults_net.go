package main

import (
	"context"
	"fmt"
	"time"
)

// netStep is one toxic setting held for a while on the proxied nodes.
type netStep struct {
	what   string
	toxics [][]toxic // per proxied node (index modulo len): the toxics it gets
}

func each(ts ...toxic) [][]toxic { return [][]toxic{ts} }

func latency(name, stream string, ms, jitter int) toxic {
	return toxic{Name: name, Type: "latency", Stream: stream, Attributes: map[string]any{"latency": ms, "jitter": jitter}}
}

// netSteps are the latency and timeout settings of fault 6, relative to node_timeout:
// close to it, beyond it, a black hole, and cut connections.
func netSteps(cfg config) []netStep {
	nt := int(cfg.nodeTimeout / time.Millisecond)
	steps := []netStep{
		{fmt.Sprintf("replies delayed %dms +-%d (node_timeout %dms)", nt*8/10, nt/10, nt),
			each(latency("near", "downstream", nt*8/10, nt/10))},
		{fmt.Sprintf("replies delayed %dms (beyond node_timeout)", nt*3/2),
			each(latency("beyond", "downstream", nt*3/2, nt/5))},
		{fmt.Sprintf("commands delayed %dms +-%d on the way in (they run after the client gave up)", nt*12/10, nt/2),
			each(latency("slowin", "upstream", nt*12/10, nt/2))},
		{"one node a black hole (commands never arrive), the other 3x node_timeout late",
			[][]toxic{
				{{Name: "hole", Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 0}}},
				{latency("late", "downstream", nt*3, 0)},
			}},
		{"connections reset after 30ms",
			each(toxic{Name: "reset", Type: "reset_peer", Stream: "upstream", Attributes: map[string]any{"timeout": 30}})},
	}
	if cfg.extra {
		steps = append(steps,
			netStep{fmt.Sprintf("commands delayed %dms +-%d on the way in", nt*2/5, nt*2/5),
				each(latency("slowin2", "upstream", nt*2/5, nt*2/5))},
			netStep{"jitter around node_timeout both ways",
				each(latency("jin", "upstream", nt/2, nt/2), latency("jout", "downstream", nt/2, nt/2))},
		)
	}
	return steps
}

// netFault: latency and timeouts between Caddy and the proxied nodes (toxiproxy), close
// to and beyond node_timeout. The three direct nodes keep a quorum; late replies, late
// commands and cut connections must not let two requests hold one key.
func netFault(steps []netStep) fault {
	return fault{name: fmt.Sprintf("6 latency/timeouts to 2 nodes (%d steps)", len(steps)), run: func(ctx context.Context, e *env) outcome {
		var o outcome
		o.start = time.Now()
		proxied := e.cfg.proxied
		type window struct{ from, to time.Time }
		windows := make([]window, 0, len(steps))
		for _, st := range steps {
			if ctx.Err() != nil {
				break
			}
			for j, i := range proxied {
				p := e.cl.proxyOf[i]
				if p == nil {
					continue
				}
				for _, t := range st.toxics[j%len(st.toxics)] {
					if err := p.add(t); err != nil {
						o.failf("%v", err)
					}
				}
			}
			stepStart := time.Now()
			sleep(ctx, e.cfg.faultHold)
			e.cl.tox.clearAll()
			windows = append(windows, window{stepStart, time.Now()})
		}
		o.end = time.Now()
		// Requests started during a step, once they are all done.
		sleep(ctx, e.cfg.wait+time.Second)
		for i, w := range windows {
			rs := e.rec.between(w.from, w.to)
			ok := latencies(rs, func(r result) bool { return r.status == 200 && r.hot })
			o.notef("%s: %d requests, %s; hot-key 200s p50 %v", steps[i].what, len(rs), formatStatuses(statusCounts(rs)), pct(ok, 50).Round(time.Millisecond))
		}
		return o
	}}
}
