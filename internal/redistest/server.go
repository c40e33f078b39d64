package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server of a test's own, on a free port, without
// persistence, that the test may kill, freeze and restart to play a Redis
// outage. It needs redis-server on PATH and fails the test otherwise.
type Server struct {
	// Addr is host:port; it stays the same across Restart.
	Addr string

	tb  testing.TB
	cmd *exec.Cmd
}

// Start runs a fresh redis-server and waits (up to 5s) until it answers.
// It is killed when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redis-server is not installed (apt-get install -y redis-server): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s := &Server{Addr: addr, tb: tb}
	s.Restart()
	tb.Cleanup(func() { s.Kill() })
	return s
}

// Restart starts the server again on the same port (after Kill) and waits
// until it answers PING.
func (s *Server) Restart() {
	s.tb.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redis-server on %s did not answer within 5s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill ends the server at once (SIGKILL): connections are reset and new
// ones refused, as when a Redis host dies.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Freeze stops the server (SIGSTOP): connections stay open and nothing
// answers, as in a network partition. Thaw resumes it.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	if s.cmd == nil {
		s.tb.Fatal("redistest: the server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatal(fmt.Errorf("redistest: signal %v: %w", sig, err))
	}
}
