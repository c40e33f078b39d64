package main

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/fmgate/fmgate/internal/config"
)

// memorySettings are the collector's target and the heap's soft limit the
// gateway serves with, and where each came from, for the start-up log.
type memorySettings struct {
	GCPercent   int
	GCFrom      string // "config" or "GOGC"
	Limit       int64  // bytes; 0: none
	LimitFrom   string // "config", "cgroup", "no cgroup limit", "GOMEMLIMIT" or "off"
	CgroupLimit int64  // the cgroup's memory limit, 0 when it sets none
}

// setMemory applies server.gcPercent and server.memoryLimit, each unless
// its environment variable (GOGC, GOMEMLIMIT) chose already: the runtime
// read those at start. readFile reads the cgroup's files.
func setMemory(c config.Server, getenv func(string) string, readFile func(string) ([]byte, error)) (memorySettings, error) {
	var m memorySettings
	if getenv("GOGC") != "" {
		m.GCPercent, m.GCFrom = debug.SetGCPercent(-1), "GOGC"
		debug.SetGCPercent(m.GCPercent)
	} else {
		m.GCPercent, m.GCFrom = cmp.Or(c.GCPercent, config.DefaultGCPercent), "config"
		debug.SetGCPercent(m.GCPercent)
	}
	if getenv("GOMEMLIMIT") != "" {
		m.Limit, m.LimitFrom = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
		if m.Limit == math.MaxInt64 {
			m.Limit = 0
		}
		return m, nil
	}
	n, auto, err := c.MemoryLimitBytes()
	if err != nil {
		return m, fmt.Errorf("server.memoryLimit: %w", err)
	}
	switch {
	case auto:
		m.CgroupLimit = cgroupMemoryLimit(readFile)
		if m.CgroupLimit > 0 {
			m.Limit, m.LimitFrom = m.CgroupLimit/4*3, "cgroup"
		} else {
			m.LimitFrom = "no cgroup limit"
		}
	case n > 0:
		m.Limit, m.LimitFrom = n, "config"
	default:
		m.LimitFrom = "off"
	}
	if m.Limit > 0 {
		debug.SetMemoryLimit(m.Limit)
	} else {
		debug.SetMemoryLimit(math.MaxInt64)
	}
	return m, nil
}

// cgroupMemoryLimit returns the memory limit of the process's cgroup, or 0
// when it sets none or it cannot be read: version 2's memory.max, else
// version 1's memory.limit_in_bytes (which says "no limit" with a number
// near 2^63), each looked for under the cgroup's own path in
// /proc/self/cgroup and then at the hierarchy's root (where a container
// with its own cgroup namespace sees its cgroup).
func cgroupMemoryLimit(readFile func(string) ([]byte, error)) int64 {
	var v1, v2 string
	if b, err := readFile("/proc/self/cgroup"); err == nil {
		for line := range strings.Lines(string(b)) {
			// hierarchy-ID:controllers:path
			parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") || strings.Contains(parts[2], "..") {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				v2 = parts[2]
			case slices.Contains(strings.Split(parts[1], ","), "memory"):
				v1 = parts[2]
			}
		}
	}
	var files []string
	if v2 != "" && v2 != "/" {
		files = append(files, path.Join("/sys/fs/cgroup", v2, "memory.max"))
	}
	files = append(files, "/sys/fs/cgroup/memory.max")
	if v1 != "" && v1 != "/" {
		files = append(files, path.Join("/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes"))
	}
	files = append(files, "/sys/fs/cgroup/memory/memory.limit_in_bytes")
	for _, f := range files {
		b, err := readFile(f)
		if err != nil {
			continue
		}
		v := string(bytes.TrimSpace(b))
		if v == "max" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0
		}
		return n
	}
	return 0
}
