package main

import (
	"os"
	"slices"
	"time"
)

// latency summarizes a set of samples.
type latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_us"`
	P90 float64 `json:"p90_us"`
	P99 float64 `json:"p99_us"`
	Max float64 `json:"max_us"`
}

// summarize sorts samples in place and reads its percentiles (nearest rank).
func summarize(samples []time.Duration) latency {
	if len(samples) == 0 {
		return latency{}
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		i := int(q*float64(len(samples))+0.5) - 1
		i = max(0, min(i, len(samples)-1))
		return us(samples[i])
	}
	return latency{N: len(samples), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: us(samples[len(samples)-1])}
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func mkdir(p string) error { return os.MkdirAll(p, 0o755) }
