package scenario

import "syscall"

// childAttr starts a child in its own process group (a Ctrl-C at the
// terminal reaches the scenario, which stops its children itself, in
// order), sent sig should the scenario die outright, so that none is left
// behind.
func childAttr(sig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: sig}
}
