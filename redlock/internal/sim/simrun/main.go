// Command simrun is `make sim`: it builds the simulation's test binary and runs seeds on
// every core for SIM_TIME (default 5m), one worker process per core, each with
// GOMAXPROCS=1 and every k-th seed, then prints one summary line:
//
//	SIM schedules=N violations=V failed_seeds=F ...
//
// and exits 1 on any violation (not in SIM_BEYOND=1 mode, whose violations are expected).
// SIM_SEED=n replays one seed (SIM_TRACE=1 prints its trace); SIM_FIRST=n sets the first
// seed (default: drawn from the clock, and printed); SIM_WORKERS=k the worker count
// (default: the cores).
package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	os.Exit(run())
}

// collectorEnv turns the collector off in the simulation's processes, bounded by a
// 1 GiB heap, unless GOGC or GOMEMLIMIT say otherwise: runSeed collects twice between
// schedules (sim_test.go), and a schedule's heap stays under 64 MB, so the collector then
// runs only there. A collection inside a schedule empties the sync.Pools go-redis and
// bufio fill and shrinks stacks that grow again: against GOGC=800 (what go test keeps),
// alternated on seeds 5000-5029, 8 to 12 % less CPU at best, 7 to 11 % on average
// (docs/simulation.md, Speed). Only here: go test -race of the package, whose other tests
// do not collect between runs, would hold gigabytes. The memory those collections free
// goes back to the kernel lazily (MADV_FREE, madvdontneed=0), so the next schedule reuses
// it without a page fault per page: a quarter of the faults, under half the system time,
// unless GODEBUG says otherwise.
func collectorEnv() []string {
	var env []string
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		env = append(env, "GOGC=off", "GOMEMLIMIT=1GiB")
	}
	if os.Getenv("GODEBUG") == "" {
		env = append(env, "GODEBUG=madvdontneed=0")
	}
	return env
}

func run() int {
	dir, err := os.MkdirTemp("", "sim")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "sim.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "./redlock/internal/sim")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "simrun: build:", err)
		return 2
	}
	base := []string{"-test.run", "^TestSim$", "-test.timeout", "0"}
	if os.Getenv("SIM_SEED") != "" {
		cmd := exec.Command(bin, base...)
		cmd.Env = append(append(os.Environ(), collectorEnv()...), "GOMAXPROCS=1")
		if p := os.Getenv("SIM_PROCS"); p != "" {
			cmd.Env = append(cmd.Env, "GOMAXPROCS="+p)
		}
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return 1
		}
		return 0
	}
	simTime := os.Getenv("SIM_TIME")
	if simTime == "" {
		simTime = "5m"
	}
	budget, err := time.ParseDuration(simTime)
	if err != nil {
		fmt.Fprintf(os.Stderr, "simrun: SIM_TIME=%q: %v\n", simTime, err)
		return 2
	}
	// SIM_PROCS=2 runs each schedule's goroutines in parallel (GOMAXPROCS=2): races
	// between goroutines at one simulated instant (a joiner and a force release) happen
	// on the CPU then, at the cost of replays.
	procs := "1"
	if s := os.Getenv("SIM_PROCS"); s != "" {
		procs = s
	}
	np, _ := strconv.Atoi(procs)
	workers := max(runtime.NumCPU()/max(np, 1), 1)
	if s := os.Getenv("SIM_WORKERS"); s != "" {
		workers, _ = strconv.Atoi(s)
	}
	first := os.Getenv("SIM_FIRST")
	if first == "" {
		first = strconv.FormatUint(rand.Uint64N(1<<40), 10)
	}
	fmt.Printf("SIM running %d workers for %v from seed %s (SIM_FIRST=%s to run these seeds again)\n", workers, budget, first, first)
	var mu sync.Mutex
	totals := map[string]float64{}
	var extra []string
	var wg sync.WaitGroup
	failed := false
	start := time.Now()
	var firstAt time.Duration // the first violation: after this long, about firstNth schedules
	firstNth := 0
	for i := range workers {
		wg.Go(func() {
			cmd := exec.Command(bin, base...)
			cmd.Env = append(append(os.Environ(), collectorEnv()...), "GOMAXPROCS="+procs, "SIM_TIME="+budget.String(), "SIM_FIRST="+first,
				fmt.Sprintf("SIM_WORKER=%d/%d", i, workers))
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				fmt.Fprintln(os.Stderr, "simrun:", err)
				return
			}
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				switch {
				case strings.HasPrefix(line, "SIM schedules="):
					mu.Lock()
					add(totals, &extra, line)
					mu.Unlock()
				case strings.HasPrefix(line, "SIM violation"):
					mu.Lock()
					if firstAt == 0 {
						firstAt = time.Since(start)
						if _, after, ok := strings.Cut(line, " nth="); ok {
							nth, _ := strconv.Atoi(strings.Fields(after)[0])
							firstNth = nth * workers
						}
					}
					mu.Unlock()
					fmt.Println(line)
				case strings.HasPrefix(line, "SIM "):
					fmt.Println(line)
				}
			}
			if err := cmd.Wait(); err != nil {
				mu.Lock()
				failed = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	n := totals["schedules"]
	perMin := n / took.Minutes()
	line := fmt.Sprintf("SIM schedules=%.0f violations=%.0f failed_seeds=%.0f workers=%d first_seed=%s schedules_per_minute=%.0f ops_per_schedule=%.0f acquires_per_schedule=%.0f commands_per_schedule=%.0f stale_writes_refused=%.0f real=%v",
		n, totals["violations"], totals["failed_seeds"], workers, first, perMin,
		totals["ops_per_schedule"]/float64(workers), totals["acquires_per_schedule"]/float64(workers),
		totals["commands_per_schedule"]/float64(workers), totals["stale_writes_refused"], took.Round(time.Second))
	if n > 0 && totals["cpu_seconds"] > 0 {
		// CPU per schedule: what speed is measured by on a shared machine (wall time
		// depends on the load).
		line += fmt.Sprintf(" cpu_per_schedule=%.3fs", totals["cpu_seconds"]/n)
	}
	if os.Getenv("SIM_BEYOND") != "" {
		// Counted apart: violations of schedules with a fault past the assumptions are
		// expected; the others' are not.
		line += fmt.Sprintf(" beyond_schedules=%.0f beyond_violations=%.0f within_violations=%.0f",
			totals["beyond_schedules"], totals["beyond_violations"], totals["within_violations"])
	}
	line += fmt.Sprintf(" rollbacks=%.0f rollbacks_left_out=%.0f", totals["rollbacks"], totals["rollbacks_left_out"])
	if firstAt > 0 {
		line += fmt.Sprintf(" first_violation_after=%v(~%d_schedules)", firstAt.Round(time.Second), firstNth)
	}
	if len(extra) > 0 {
		line += " " + strings.Join(extra, " ")
	}
	fmt.Println(line)
	if os.Getenv("SIM_BEYOND") != "" {
		if totals["within_violations"] > 0 {
			return 1 // a schedule with nothing past the assumptions failed
		}
		return 0
	}
	if totals["violations"] > 0 || failed {
		return 1
	}
	return 0
}

// add folds one worker's summary line into the totals (numbers add up; per-schedule
// figures are averaged over the workers by the caller; the rest is kept as text).
func add(totals map[string]float64, extra *[]string, line string) {
	for _, f := range strings.Fields(strings.TrimPrefix(line, "SIM ")) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		if x, err := strconv.ParseFloat(v, 64); err == nil && k != "seeds" {
			totals[k] += x
			continue
		}
		switch k {
		case "real", "cpu":
			if d, err := time.ParseDuration(v); err == nil && k == "cpu" {
				totals["cpu_seconds"] += d.Seconds()
			}
		case "seeds":
			for i, e := range *extra {
				if strings.HasPrefix(e, "seeds=") {
					(*extra)[i] += "," + v
					return
				}
			}
			*extra = append(*extra, f)
		default:
			*extra = append(*extra, f)
		}
	}
}
