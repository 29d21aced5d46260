package redlock

import (
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// HealthObserver is an optional extension of Observer: an Observer that also implements
// it is told when a node stops or starts answering and when it is quarantined, once per
// transition and per Client (not per call). Like Observer, it must be fast and must not
// block: it is called from the Client's health checks.
type HealthObserver interface {
	// NodeDown reports that node stopped answering its health checks (or was found
	// unusable, e.g. lacking a permission); problem is the last error. A node that does not
	// answer its first check is reported too.
	NodeDown(node, problem string)
	// NodeUp reports that a node reported down answers again.
	NodeUp(node string)
	// NodeQuarantined reports that node will not vote before until, and why.
	NodeQuarantined(node string, until time.Time, cause QuarantineCause)
}

// QuarantineCause says why a node does not vote for a while: it may have lost keys that
// locks still hold, so it waits until every lock it may have held has lapsed.
type QuarantineCause string

// The causes of a quarantine.
const (
	// QuarantineRestart: the node's run_id changed (it restarted, maybe without its data).
	QuarantineRestart QuarantineCause = "restart"
	// QuarantineYoung: a node first seen by this client started less than a quarantine
	// ago, not together with most nodes; reported once, when its vote is first refused.
	QuarantineYoung QuarantineCause = "young"
	// QuarantineDataLoss: the node lost its data without a visible restart.
	QuarantineDataLoss QuarantineCause = "data_loss"
)

// healthReport is what a node's HealthObserver was last told. Only the node's health
// loop touches it (reportHealth), so it needs no lock.
type healthReport struct {
	reported bool // a state was recorded (the first check ran)
	up       bool
}

// reportHealth tells the HealthObserver, if any, about a change between answering and
// not answering since the last health check. Called by the health loop after each check
// (and the permission probe that may follow it), so a check that passes and a probe that
// fails in the same round are one state, not a flap.
func (n *node) reportHealth() {
	ho, ok := n.c.opt.Observer.(HealthObserver)
	if !ok || n.c.ctx.Err() != nil {
		return // none, or closing: a check cut short by Close says nothing about the node
	}
	f := n.tr.Facts()
	up, checked, problem := f.Up, f.Checked, f.LastErr
	if !checked {
		return
	}
	prev := n.health
	n.health = healthReport{reported: true, up: up}
	switch {
	case !up && (!prev.reported || prev.up):
		msg := ""
		if problem != nil {
			msg = problem.Error()
		}
		ho.NodeDown(n.addr, msg)
	case up && prev.reported && !prev.up:
		ho.NodeUp(n.addr)
	}
}

// reportQuarantine tells the HealthObserver, if any, that the node will not vote before
// until. The callers make sure it is called once per quarantine.
func (n *node) reportQuarantine(until time.Time, cause QuarantineCause) {
	if ho, ok := n.c.opt.Observer.(HealthObserver); ok && !until.IsZero() {
		ho.NodeQuarantined(n.addr, until, cause)
	}
}

// NodeAddresses returns the addresses New would give the nodes of urls (as in
// NodeStatus.Address and the Observer's calls: never with a password), without
// connecting.
func NodeAddresses(urls []string) ([]string, error) {
	out := make([]string, 0, len(urls))
	for _, u := range urls {
		addr, err := transport.ParseURL(u)
		if err != nil {
			return nil, err
		}
		out = append(out, addr)
	}
	return out, nil
}
