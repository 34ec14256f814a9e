//go:build !linux

package testcluster

import (
	"os/exec"
	"time"
)

// startProcess starts cmd. Outside Linux there is no parent-death signal;
// t.Cleanup still kills every node.
func startProcess(cmd *exec.Cmd) error { return cmd.Start() }

// waitStopped cannot observe the process state here; it gives SIGSTOP a
// moment to take effect.
func waitStopped(pid int, timeout time.Duration) bool {
	time.Sleep(min(timeout, 100*time.Millisecond))
	return true
}
