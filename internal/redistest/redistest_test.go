package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// do sends one command and returns the reply as a string (errors as Go errors).
func do(addr string, timeout time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	return roundTrip(bufio.NewReader(c), c, args...)
}

func roundTrip(r *bufio.Reader, w io.Writer, args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return "", err
	}
	return readReply(r)
}

// readReply reads one RESP2 reply; array elements are joined with "\n".
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil // nil bulk
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		elems := make([]string, 0, max(n, 0))
		for range n {
			e, err := readReply(r)
			if err != nil {
				return "", err
			}
			elems = append(elems, e)
		}
		return strings.Join(elems, "\n"), nil
	}
	return "", fmt.Errorf("unsupported reply %q", line)
}

func mustDo(t *testing.T, addr string, args ...string) string {
	t.Helper()
	v, err := do(addr, 2*time.Second, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	return v
}

func runID(t *testing.T, addr string) string {
	t.Helper()
	info := mustDo(t, addr, "INFO", "server")
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "run_id:"); ok {
			return v
		}
	}
	t.Fatalf("no run_id in INFO server of %s", addr)
	return ""
}

func pidOf(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0
	}
	return s.p.pid
}

// alive reports whether a process (or zombie) with this pid exists.
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

func TestStartPing(t *testing.T) {
	t.Parallel()
	servers := StartN(t, 3)
	if len(servers) != 3 {
		t.Fatalf("got %d servers", len(servers))
	}
	seen := map[int]bool{}
	for i, s := range servers {
		if seen[s.Port()] {
			t.Fatalf("port %d used twice", s.Port())
		}
		seen[s.Port()] = true
		if want := "127.0.0.1:" + strconv.Itoa(s.Port()); s.Addr() != want {
			t.Errorf("Addr() = %q, want %q", s.Addr(), want)
		}
		if want := "redis://" + s.Addr(); s.URL() != want || URLs(servers)[i] != want {
			t.Errorf("URL() = %q, URLs()[%d] = %q, want %q", s.URL(), i, URLs(servers)[i], want)
		}
		if !s.Running() || s.Paused() {
			t.Errorf("%s: Running=%v Paused=%v", s.Addr(), s.Running(), s.Paused())
		}
		if got := mustDo(t, s.Addr(), "PING"); got != "PONG" {
			t.Errorf("%s PING = %q", s.Addr(), got)
		}
		// No persistence.
		if got := mustDo(t, s.Addr(), "CONFIG", "GET", "save"); got != "save\n" {
			t.Errorf("CONFIG GET reply %q", got)
		}
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := StartN(t, 1)[0]
	// A connection opened before the pause is kept and answers after resume.
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil { // idempotent
		t.Fatal(err)
	}
	if !s.Paused() || !s.Running() {
		t.Fatalf("Paused=%v Running=%v", s.Paused(), s.Running())
	}
	_, err = do(s.Addr(), 200*time.Millisecond, "PING")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING on paused server: err = %v, want timeout", err)
	}
	if err := c.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "*1\r\n$4\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}

	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := s.Resume(); err != nil { // idempotent
		t.Fatal(err)
	}
	if s.Paused() || !s.Running() {
		t.Fatalf("Paused=%v Running=%v", s.Paused(), s.Running())
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("pending PING after resume: %q, %v", line, err)
	}
	if got := mustDo(t, s.Addr(), "PING"); got != "PONG" {
		t.Fatalf("PING after resume = %q", got)
	}
}

func TestKillStart(t *testing.T) {
	t.Parallel()
	s := StartN(t, 1)[0]
	port := s.Port()
	id := runID(t, s.Addr())
	mustDo(t, s.Addr(), "SET", "k", "v")
	mustDo(t, s.Addr(), "SAVE") // even a snapshot on disk must not survive
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pid := pidOf(s)

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil { // idempotent
		t.Fatal(err)
	}
	if s.Running() || s.Paused() {
		t.Fatalf("after Kill: Running=%v Paused=%v", s.Running(), s.Paused())
	}
	if alive(pid) {
		t.Fatalf("pid %d still exists after Kill", pid)
	}
	if _, err := do(s.Addr(), time.Second, "PING"); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	if err := c.SetDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(bufio.NewReader(c), c, "PING"); err == nil {
		t.Fatal("old connection still works after Kill")
	}
	if err := s.Pause(); err == nil {
		t.Fatal("Pause of a killed server succeeded")
	}

	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start of a running server succeeded")
	}
	if s.Port() != port || !s.Running() {
		t.Fatalf("after Start: port %d (was %d), Running=%v", s.Port(), port, s.Running())
	}
	if id2 := runID(t, s.Addr()); id2 == id {
		t.Fatalf("run_id unchanged after restart: %s", id)
	}
	if _, err := do(s.Addr(), time.Second, "GET", "k"); err != nil {
		t.Fatal(err)
	}
	if n := mustDo(t, s.Addr(), "DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE after restart = %s, want 0", n)
	}

	// Restart works on a running server, and Kill on a paused one.
	id = runID(t, s.Addr())
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if runID(t, s.Addr()) == id || s.Port() != port {
		t.Fatal("Restart did not restart on the same port")
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Kill of paused server took %v", d)
	}
	if s.Running() || s.Paused() {
		t.Fatalf("after Kill of paused: Running=%v Paused=%v", s.Running(), s.Paused())
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if got := mustDo(t, s.Addr(), "PING"); got != "PONG" {
		t.Fatalf("PING = %q", got)
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	servers, err := New(2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		pid := pidOf(s)
		if i == 1 {
			if err := s.Pause(); err != nil { // Stop must cope with a paused server
				t.Fatal(err)
			}
		}
		start := time.Now()
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Stop took %v", d)
		}
		if err := s.Stop(); err != nil { // safe twice
			t.Fatal(err)
		}
		if alive(pid) {
			t.Errorf("pid %d still exists after Stop", pid)
		}
		if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
			t.Errorf("temp dir %s not removed: %v", s.dir, err)
		}
		if _, err := do(s.Addr(), time.Second, "PING"); err == nil {
			t.Errorf("PING succeeded after Stop")
		}
		if s.Running() || s.Paused() {
			t.Errorf("after Stop: Running=%v Paused=%v", s.Running(), s.Paused())
		}
		if err := s.Start(); err == nil {
			t.Error("Start after Stop succeeded")
		}
		if err := s.Restart(); err == nil {
			t.Error("Restart after Stop succeeded")
		}
		// Retired, not released: a finished test's client may still dial it, and must
		// not reach a later test's server there.
		portsMu.Lock()
		retired := ports[s.port]
		portsMu.Unlock()
		if !retired {
			t.Errorf("port %d of a stopped server can be handed out again", s.port)
		}
	}
}

func TestCleanupStopsPaused(t *testing.T) {
	t.Parallel()
	var pids []int
	var dirs []string
	t.Run("inner", func(t *testing.T) {
		servers := StartN(t, 2)
		for _, s := range servers {
			pids = append(pids, pidOf(s))
			dirs = append(dirs, s.dir)
		}
		if err := servers[0].Pause(); err != nil {
			t.Fatal(err)
		}
	})
	for i := range pids {
		if alive(pids[i]) {
			t.Errorf("pid %d survived t.Cleanup", pids[i])
		}
		if _, err := os.Stat(dirs[i]); !os.IsNotExist(err) {
			t.Errorf("dir %s survived t.Cleanup", dirs[i])
		}
	}
}

func TestRequirePass(t *testing.T) {
	t.Parallel()
	s := StartN(t, 1, Options{Args: []string{"--requirepass", "secret", "--maxmemory", "1mb"}})[0]
	if _, err := do(s.Addr(), time.Second, "PING"); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("PING without AUTH: %v, want NOAUTH", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(r, c, "AUTH", "secret"); err != nil {
		t.Fatal(err)
	}
	if v, err := roundTrip(r, c, "CONFIG", "GET", "maxmemory"); err != nil || v != "maxmemory\n1048576" {
		t.Fatalf("CONFIG GET: %q, %v", v, err)
	}
}

func TestBadArgs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // only this test's temp dirs land here
	servers, err := New(2, Options{Args: []string{"--no-such-option", "1"}})
	if err == nil {
		stopAll(servers)
		t.Fatal("New with a bad option succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-option") {
		t.Errorf("error does not include the redis log: %v", err)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("temp dir %s left behind", e.Name())
	}
}

// fakeTB records Fatalf and ends the goroutine like testing.T does.
type fakeTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Cleanup(func())        { panic("Cleanup must not be reached") }
func (f *fakeTB) Errorf(string, ...any) {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartN(f, 1)
	}()
	<-done
	if !strings.Contains(f.msg, "redis-server") || !strings.Contains(f.msg, "apt-get install -y redis-server") {
		t.Fatalf("Fatalf message = %q", f.msg)
	}
	if _, err := New(1, Options{}); err == nil {
		t.Fatal("New without redis-server succeeded")
	}
}

func TestManyParallel(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			servers, err := New(5, Options{})
			if err != nil {
				t.Error(err)
				return
			}
			for _, s := range servers {
				if _, err := do(s.Addr(), 2*time.Second, "PING"); err != nil {
					t.Error(err)
				}
			}
			for _, err := range stopAll(servers) {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

func TestStartRetriesBusyPort(t *testing.T) {
	t.Parallel()
	s := StartN(t, 1)[0]
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", s.Addr()) // someone grabs the port meanwhile
	if err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(300*time.Millisecond, func() { l.Close() })
	defer timer.Stop()
	start := time.Now()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("Start returned after %v while the port was busy", d)
	}
	if got := mustDo(t, s.Addr(), "PING"); got != "PONG" {
		t.Fatalf("PING = %q", got)
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := New(1, Options{Args: []string{"--maxmemory", "lots"}})
	if err == nil {
		t.Fatal("New with a bad value succeeded")
	}
	t.Logf("error: %v", err)
	if !strings.HasPrefix(err.Error(), "redistest: ") || !strings.Contains(err.Error(), "maxmemory") {
		t.Errorf("unhelpful error: %v", err)
	}
}
