package childproc

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// A started child carries the parent-death signal, and WaitStopped sees a
// SIGSTOP take effect (and a running process as not stopped).
func TestStartAndWaitStopped(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := Start(cmd); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("parent-death signal %v", cmd.SysProcAttr.Pdeathsig)
	}
	pid := cmd.Process.Pid
	if WaitStopped(pid, 50*time.Millisecond) {
		t.Fatal("a running process reported stopped")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !WaitStopped(pid, 5*time.Second) {
		t.Fatal("SIGSTOP not observed")
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
}
