package main

// The report: a failed case's seed, the Caddyfile it ran, its requests, its ending and
// faults, the work log and what each client saw, the violations, and the one command
// that replays it; and the summary line.

import (
	"fmt"
	"io"
	"strings"
	"time"
)

func (r result) report(out io.Writer) {
	c := r.c
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("+%dms", t.Sub(r.epoch).Milliseconds())
	}
	var b strings.Builder
	head := "VIOLATION"
	if len(r.v.violations) == 0 {
		head = "CASE"
	}
	fmt.Fprintf(&b, "\n=== %s seed=%d (case %s: shape %s, ending %s, mode %s", head, c.seed, c.lane, c.shape, c.ending, c.lock.mode)
	if c.lock.mode == modeLimit {
		fmt.Fprintf(&b, " %d", c.lock.limit)
	}
	fmt.Fprintf(&b, ", fencing %v, dry_run %v, max_hold %v, bypass %v)\n", c.lock.fencing, c.lock.dryRun, c.lock.maxHold, c.lock.bypass)
	for _, v := range r.v.violations {
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	fmt.Fprintf(&b, "replay: EXPLORE_SEED=%d make explore\n", c.seed)
	if len(r.batch) > 1 {
		fmt.Fprintf(&b, "(it ran in a batch with seeds %v; the replay runs it alone)\n", r.batch)
	}
	fmt.Fprintf(&b, "blocks:")
	for _, bl := range c.blocks {
		fmt.Fprintf(&b, " %s[%s]", bl.where, bl.keys)
		if bl.dryRun {
			b.WriteString("(dry_run)")
		}
		if bl.mode != "" {
			fmt.Fprintf(&b, "(%s %d)", bl.mode, bl.limit)
		}
		if bl.maxHold {
			b.WriteString("(max_hold)")
		}
	}
	if c.shape == shapeForwardAuth {
		fmt.Fprintf(&b, " forward_auth_inside=%v", c.authInside)
	}
	if c.bodyMax {
		fmt.Fprintf(&b, " request_body_max_size=%d", bodyMax)
	}
	if c.keyVia != "" {
		fmt.Fprintf(&b, " keys_via=%s", c.keyVia)
	}
	if c.mix != "" {
		fmt.Fprintf(&b, " mix=%s", c.mix)
	}
	fmt.Fprintf(&b, "\nrequests:\n")
	for _, q := range c.reqs {
		fmt.Fprintf(&b, "  %s %s %s at +%dms client=%s", q.id, q.method, q.path(c.lane), q.at.Milliseconds(), q.client)
		if q.client == "abort" {
			fmt.Fprintf(&b, " (leaves after %dms)", q.abortAt.Milliseconds())
		}
		if q.client == clientWS {
			fmt.Fprintf(&b, " (%d messages %dms apart", q.wsMsgs, q.wsGap.Milliseconds())
			if q.wsLeave > 0 {
				fmt.Fprintf(&b, ", leaves after %d, reset %v", q.wsLeave, q.wsReset)
			}
			b.WriteString(")")
		}
		if q.deny {
			b.WriteString(" X-Auth=deny")
		}
		fmt.Fprintf(&b, " X-Work=%q", q.work)
		if q.errWork != "" {
			fmt.Fprintf(&b, " X-Work-Err=%q", q.errWork)
		}
		if q.sized {
			b.WriteString(" (body of known length)")
		}
		if q.first != "" {
			fmt.Fprintf(&b, " X-Work-First=%q", q.first)
		}
		fmt.Fprintf(&b, " keys=%v\n", c.modelKeys(q, "work"))
	}
	f := r.f
	fmt.Fprintf(&b, "ending %s: force %s..%s (%s), outage %s..%s, reload %s, stop %s\n", c.ending,
		at(f.forceStart), at(f.forceDone), f.forceKey, at(f.pauseStart), at(f.pauseEnd), at(f.reloadAt), at(f.stopAt))
	fmt.Fprintf(&b, "work log (the upstream's account):\n")
	for _, w := range r.works {
		end := "still running"
		if w.done {
			end = at(w.end) + " " + w.how
		}
		fmt.Fprintf(&b, "  %s via %s [%s, %s] token=%q chunks=%d spec=%+v\n", describe(w), w.via, at(w.start), end, w.token, len(w.chunks), w.spec)
	}
	fmt.Fprintf(&b, "clients:\n")
	for _, o := range r.outs {
		fmt.Fprintf(&b, "  %s [%s, %s] status=%d chunks=%d whole=%v aborted=%v err=%q\n", o.req, at(o.sent), at(o.ended), o.status, len(o.chunks), o.whole, o.aborted, o.err)
	}
	fmt.Fprintf(&b, "caddyfile (the batch's):\n%s", r.caddyfile)
	fmt.Fprint(out, b.String())
}
