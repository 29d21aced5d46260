package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

// The bench's processes (redis-server, caddy, proxies) are internal/childproc children:
// each logs to a file, dies with the bench, and is stopped by its PID.

// stopGrace is how long a child gets between SIGTERM and SIGKILL.
const stopGrace = 3 * time.Second

// cleanupOnSignal stops all children and runs extra cleanup when the bench is interrupted.
func cleanupOnSignal(extra func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-ch
		fmt.Fprintf(os.Stderr, "\nbench: %v: stopping child processes\n", s)
		childproc.StopAll(stopGrace)
		extra()
		os.Exit(130)
	}()
}

// errExited is returned when a child dies while we wait for it to become ready.
var errExited = errors.New("process exited")
