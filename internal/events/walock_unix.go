//go:build unix

package events

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile holds the process id of the fmgate writing the log.
const lockFile = "LOCK"

// lockDir takes dir's lock, so that two processes never write one log:
// two instances started in one working directory would replay and delete
// each other's records. The lock is the kernel's (flock), so a process
// that died holds none. The caller closes the file to release it.
func lockDir(dir string) (*os.File, error) {
	name := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("events: wal: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid, _ := os.ReadFile(name)
			return nil, fmt.Errorf("events: wal: %s is in use by another fmgate (pid %s): give each instance its own working directory, or its own events.wal.dir",
				dir, orUnknown(strings.TrimSpace(string(pid))))
		}
		return nil, fmt.Errorf("events: wal: lock %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
