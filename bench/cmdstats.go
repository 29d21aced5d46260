package main

import (
	"fmt"
	"slices"
	"strings"
)

// cmdCount is Redis work per served request, summed over all nodes, from INFO
// commandstats. Commands run inside Lua scripts (the SET, GET, DEL, PUBLISH of redlock's
// scripts, redsync's release and extend) are counted by Redis under their own names, next
// to the EVALSHA/EVAL that ran them: Calls is every command Redis executed, TopLevel
// leaves the in-script ones out (it is what went over the network).
type cmdCount struct {
	Requests int                `json:"requests"`
	PerReq   map[string]float64 `json:"per_request"`
	Calls    float64            `json:"calls_per_request"`
	TopLevel float64            `json:"network_commands_per_request"`
	// Reads is socket reads Redis processed per request (bench's own INFO/CONFIG
	// included, a few per run); TopLevel/Reads is the pipelining depth.
	Reads float64 `json:"redis_reads_per_request"`
}

// Commands counted as run inside the Lua scripts of each client (so not over the
// network). redlock sends a first try without fencing as a plain SET NX PX, with a GET of
// the node's data marker behind the SETs of each pipeline, and runs every other try in
// the acquire script: SET counts as sent (which errs high where later tries run the
// script: the hot key), GET as in-script (which errs low by one GET per pipeline; "cmds
// per Redis read" shows the pipelines). With fencing every try is the script, which also
// writes the counter with a SET: there SET counts as in-script.
var (
	redlockInner        = map[string]bool{"get": true, "del": true, "publish": true, "pexpire": true, "pttl": true, "time": true}
	redlockFencingInner = map[string]bool{"get": true, "set": true, "del": true, "publish": true, "pexpire": true, "pttl": true, "time": true}
	redsyncInner        = map[string]bool{"get": true, "del": true, "pexpire": true}
)

func newCmdCount(delta map[string]int64, requests int, inner map[string]bool) cmdCount {
	c := cmdCount{Requests: requests, PerReq: map[string]float64{}}
	if requests == 0 {
		return c
	}
	for k, v := range delta {
		per := float64(v) / float64(requests)
		if k == readsKey {
			c.Reads = per
			continue
		}
		c.PerReq[k] = per
		c.Calls += per
		if !inner[k] {
			c.TopLevel += per
		}
	}
	return c
}

// short renders the per-request breakdown, biggest first: "evalsha 10.0, set 5.0, ...".
func (c cmdCount) short() string {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range c.PerReq {
		if v >= 0.05 {
			l = append(l, kv{k, v})
		}
	}
	slices.SortFunc(l, func(a, b kv) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
		}
		return strings.Compare(a.k, b.k)
	})
	var parts []string
	for _, e := range l {
		parts = append(parts, fmt.Sprintf("%s %.1f", e.k, e.v))
	}
	return strings.Join(parts, ", ")
}

func addCounts(dst, src map[string]int64) {
	for k, v := range src {
		dst[k] += v
	}
}

// depth renders network commands per Redis read: "1.4" (the pipelining depth).
func (c cmdCount) depth() string {
	if c.Reads <= 0 {
		return ""
	}
	return fmt.Sprintf("%.1f", c.TopLevel/c.Reads)
}
