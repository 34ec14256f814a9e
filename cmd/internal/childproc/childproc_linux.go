// Package childproc starts the crownd processes of test harnesses (the
// testcluster package, crown-chaos) so that they die with their parent, and
// observes when a SIGSTOP has really taken effect.
package childproc

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Children get a parent-death signal, so a harness that dies (a test
// -timeout panic, a crash) leaves no orphan crownd behind. Linux sends that
// signal when the *thread* that forked the child exits, not the process, so
// every child is forked from one goroutine locked to its OS thread for the
// life of the process: that thread never exits before the process does. It
// is process-wide by nature, hence the one package-level spawner.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

// Start starts cmd with SIGKILL as its parent-death signal, keeping any
// other SysProcAttr the caller set.
func Start(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawner.reqs <- r
	return <-r.done
}

// WaitStopped waits until every thread of pid is stopped, or timeout
// passes (false). SIGSTOP is delivered asynchronously: a thread on another
// CPU may still answer a request for a moment after kill(2) returns.
func WaitStopped(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for !allStopped(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // the thread is gone
		}
		// pid (comm) state ...: comm may contain spaces, so cut at the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return false
		}
		if st := s[i+2]; st != 'T' && st != 't' {
			return false
		}
	}
	return true
}
