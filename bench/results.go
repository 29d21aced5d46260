package main

import (
	"encoding/json"
	"os"
	"time"
)

// results is everything one run measured; it is written as JSON.
type results struct {
	Command     string        `json:"command"`
	Quick       bool          `json:"quick"`
	Started     time.Time     `json:"started"`
	Seconds     float64       `json:"seconds"`
	Host        hostInfo      `json:"host"`
	Settings    config        `json:"settings"`
	Floor       []latRow      `json:"floor"`
	Lock        []latRow      `json:"lock_cost"`
	Overhead    []httpRow     `json:"through_proxy_unique_keys"`
	CPUCost     []cpuCost     `json:"cpu_per_locked_request,omitempty"`
	Hot         []hotRow      `json:"hot_key"`
	HotLib      []hotLibRow   `json:"hot_key_library"`
	FaultyHot   []faultyRow   `json:"hot_key_faulty_node"`
	Waiters     []waitRow     `json:"waiters"`
	Modes       []modeRow     `json:"lock_modes,omitempty"`
	ModeMix     []mixRow      `json:"lock_modes_mixed,omitempty"`
	FenceMem    []fenceMemRow `json:"fencing_state,omitempty"`
	SeqCost     []seqCostRow  `json:"write_sequence_cost,omitempty"`
	Targets     []targetCheck `json:"targets"`
	Violations  int64         `json:"violations"`
	ViolLog     []string      `json:"violation_examples,omitempty"`
	Pending     []string      `json:"pending,omitempty"`
	LogProblems []string      `json:"log_problems,omitempty"`
	Notes       []string      `json:"notes,omitempty"`
	Background  []string      `json:"background_cpu,omitempty"` // other processes' CPU per phase
	Errors      []string      `json:"errors,omitempty"`
	Profiles    []string      `json:"profiles,omitempty"`
}

type hostInfo struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go"`
	Redis     string `json:"redis"`
	Kernel    string `json:"kernel"`
}

// targetCheck is one target of issue 6 against this run.
type targetCheck struct {
	Target string `json:"target"`
	Value  string `json:"value"`
	Met    *bool  `json:"met"` // nil: not measured
}

func (r *results) write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
