// Package childproc starts and stops helper processes (redis-server, cmd/caddy, proxies,
// prometheus) for the tests, the chaos suite and the benchmark: each dies with its parent
// (Fork: the one place that knows how), and is only ever signalled by its own PID while it
// runs. Start also logs it to a file.
package childproc

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Child is one process started by Start.
type Child struct {
	Name string
	cmd  *exec.Cmd
	pid  int
	done <-chan struct{} // closed once the child was reaped
	err  error           // Wait's result, valid once done is closed
}

var (
	mu       sync.Mutex
	children = map[*Child]bool{}
)

// Start runs bin with args in dir (empty: the current directory), with env added to the
// environment; stdout and stderr are appended to logPath. The child gets its own process
// group and a parent-death signal.
func Start(name, bin string, args, env []string, dir, logPath string) (*Child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c := &Child{Name: name, cmd: cmd}
	done, err := Fork(cmd, func(err error) {
		logf.Close()
		c.err = err
	})
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c.pid, c.done = cmd.Process.Pid, done
	mu.Lock()
	children[c] = true
	mu.Unlock()
	return c, nil
}

// Fork starts cmd with a parent-death signal (SIGKILL: the child dies with this
// process, also when a test binary is killed) and waits for it; exited, if not nil, gets
// Wait's result before the returned channel closes.
//
// The parent-death signal fires when the forking *thread* exits, not the process, and Go
// ends a thread when a goroutine locked to it ends (redistest's servers do, as they
// stop): a child forked from a thread that later ended that way was killed in the middle
// of a test. So the fork happens on a goroutine that keeps its thread locked until the
// child has exited.
func Fork(cmd *exec.Cmd, exited func(error)) (<-chan struct{}, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded with the goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		if exited != nil {
			exited(err)
		}
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}

// PID is the child's process id.
func (c *Child) PID() int { return c.pid }

// Exited reports whether the child has exited (and was reaped).
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Err is how the child ended (nil while it runs).
func (c *Child) Err() error {
	if !c.Exited() {
		return nil
	}
	return c.err
}

// Signal sends sig to the child's PID; never once it was reaped (the PID may be reused).
func (c *Child) Signal(sig syscall.Signal) error {
	if c.Exited() {
		return fmt.Errorf("%s (pid %d) has exited: %v", c.Name, c.pid, c.err)
	}
	return syscall.Kill(c.pid, sig)
}

// Stop ends the child: SIGTERM and SIGCONT (in case it is paused), SIGKILL after grace.
func (c *Child) Stop(grace time.Duration) {
	mu.Lock()
	delete(children, c)
	mu.Unlock()
	if c.Exited() {
		return
	}
	_ = syscall.Kill(c.pid, syscall.SIGTERM)
	_ = syscall.Kill(c.pid, syscall.SIGCONT)
	select {
	case <-c.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(c.pid, syscall.SIGKILL)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
	}
}

// Running lists the children started and not yet stopped.
func Running() []*Child {
	mu.Lock()
	defer mu.Unlock()
	out := make([]*Child, 0, len(children))
	for c := range children {
		out = append(out, c)
	}
	return out
}

// StopAll stops every child still running, in parallel.
func StopAll(grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range Running() {
		wg.Go(func() { c.Stop(grace) })
	}
	wg.Wait()
}
