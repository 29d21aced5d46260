package main

import (
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

// cpuMeter reads the CPU time used by a set of processes between start and stop.
type cpuMeter struct {
	pids  []int
	start []time.Duration
}

func newCPUMeter(procs []*childproc.Child) *cpuMeter {
	m := &cpuMeter{}
	for _, p := range procs {
		m.pids = append(m.pids, p.PID())
	}
	m.start = m.read()
	return m
}

func (m *cpuMeter) read() []time.Duration {
	out := make([]time.Duration, len(m.pids))
	for i, pid := range m.pids {
		out[i], _ = cpuTime(pid)
	}
	return out
}

// used returns the CPU time used since newCPUMeter.
func (m *cpuMeter) used() time.Duration {
	var d time.Duration
	for i, t := range m.read() {
		d += t - m.start[i]
	}
	return d
}

func redisProcs(nodes []*redisNode) []*childproc.Child {
	var ps []*childproc.Child
	for _, n := range nodes {
		ps = append(ps, n.proc)
	}
	return ps
}

// frontProcs lists the processes behind a variant's targets.
func frontProcs(v httpVariant) []*childproc.Child {
	var ps []*childproc.Child
	seen := map[*childproc.Child]bool{}
	for _, t := range v.targets {
		if fe := frontendOfTarget[t]; fe != nil && !seen[fe.proc] {
			seen[fe.proc] = true
			ps = append(ps, fe.proc)
		}
	}
	return ps
}
