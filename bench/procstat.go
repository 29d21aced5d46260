package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// rssBytes reads VmRSS of pid from /proc.
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// cpuTime reads user+system CPU time of pid from /proc (clock ticks of 10ms).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+2:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

var debugClient = &http.Client{Timeout: 30 * time.Second}

// goroutines reads the total from /debug/pprof/goroutine?debug=1.
func goroutines(debugBase string) (int, error) {
	resp, err := debugClient.Get(debugBase + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscanf(line, "goroutine profile: total %d", &n); err != nil {
		return 0, fmt.Errorf("goroutines: unexpected %q", line)
	}
	return n, nil
}

// goMem is the part of runtime.MemStats the bench reports, from /debug/vars.
type goMem struct {
	HeapInuse  int64
	StackInuse int64
	Sys        int64
}

func memstats(debugBase string) (goMem, error) {
	resp, err := debugClient.Get(debugBase + "/debug/vars")
	if err != nil {
		return goMem{}, err
	}
	defer resp.Body.Close()
	var v struct{ Memstats goMem }
	err = json.NewDecoder(resp.Body).Decode(&v)
	return v.Memstats, err
}
