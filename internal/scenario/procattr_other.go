//go:build !linux

package scenario

import "syscall"

// childAttr starts a child in its own process group. Only Linux can have
// a child signalled when its parent dies; elsewhere a scenario killed
// outright may leave its children running.
func childAttr(syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
