package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Startup and shutdown noise in Caddy's log.
var benignLog = []string{"HTTP/2 skipped", "HTTP/3 skipped", "exiting", "shutting down", "stopped previous server",
	"server is listening only on the HTTP port", "admin endpoint disabled", "persist"}

// logProblems returns the warn/error lines of a front end's log (Caddy logs JSON; the Go
// proxy logs plain lines), ignoring startup and shutdown noise.
func (f *frontend) logProblems() []string {
	file, err := os.Open(f.log)
	if err != nil {
		return nil
	}
	defer file.Close()
	var out []string
	s := bufio.NewScanner(file)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		bad := strings.Contains(line, `"level":"error"`) || strings.Contains(line, `"level":"warn"`) ||
			strings.Contains(line, "panic") || (!strings.HasPrefix(line, "{") && strings.TrimSpace(line) != "")
		for _, b := range benignLog {
			if strings.Contains(line, b) {
				bad = false
			}
		}
		if bad {
			out = append(out, line)
		}
	}
	return out
}

// noteLogs adds a summary of a front end's log problems to the results.
func (r *results) noteLogs(f *frontend) {
	p := f.logProblems()
	if len(p) == 0 {
		return
	}
	r.LogProblems = append(r.LogProblems, fmt.Sprintf("%s: %d warn/error log lines (log: %s)", f.name, len(p), f.log))
	for _, l := range p[:min(len(p), 3)] {
		if len(l) > 400 {
			l = l[:400] + "..."
		}
		r.LogProblems = append(r.LogProblems, "  "+l)
	}
}
