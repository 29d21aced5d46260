package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

// The box is shared: other processes' CPU during a phase makes its numbers noisier. A
// bgMeter measures it as all CPU time used on the machine (/proc/stat) minus what the
// bench and its children used.
type bgMeter struct {
	t0       time.Time
	machine0 time.Duration
	ours0    time.Duration
}

func newBGMeter() *bgMeter {
	return &bgMeter{t0: time.Now(), machine0: machineBusy(), ours0: oursCPU()}
}

// cores returns the average number of cores other processes kept busy since the start.
func (m *bgMeter) cores() float64 {
	el := time.Since(m.t0)
	if el <= 0 {
		return 0
	}
	other := (machineBusy() - m.machine0) - (oursCPU() - m.ours0)
	return max(0, other.Seconds()/el.Seconds())
}

// machineBusy is the non-idle CPU time of all cores (/proc/stat, clock ticks of 10ms).
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is already in user
			break
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond
}

// oursCPU is the CPU time of the bench and every child still registered.
func oursCPU() time.Duration {
	d, _ := cpuTime(os.Getpid())
	for _, c := range childproc.Running() {
		if t, err := cpuTime(c.PID()); err == nil {
			d += t
		}
	}
	return d
}

// noteBackground records how busy the rest of the machine was during a phase.
func noteBackground(res *results, phase string, m *bgMeter) {
	c := m.cores()
	res.Background = append(res.Background, fmt.Sprintf("%s: %.2f cores", phase, c))
	if c > 0.25 {
		notef("other processes kept %.2f of the %d cores busy during %s: its figures are noisier", c, res.Host.CPUs, phase)
	}
}
