//go:build !linux

// Package childproc starts the crownd processes of test harnesses; see
// childproc_linux.go.
package childproc

import (
	"os/exec"
	"time"
)

// Start starts cmd. Outside Linux there is no parent-death signal; the
// harnesses still kill every child they started on cleanup.
func Start(cmd *exec.Cmd) error { return cmd.Start() }

// WaitStopped cannot observe the process state here; it gives SIGSTOP a
// moment to take effect.
func WaitStopped(pid int, timeout time.Duration) bool {
	time.Sleep(min(timeout, 100*time.Millisecond))
	return true
}
