//go:build linux

package nemesis

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

// Children get a parent-death signal, so a crown-chaos that dies leaves no
// crownd behind. Linux sends it when the thread that forked the child exits,
// so every child is forked from one goroutine locked to its OS thread.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func startChild(cmd *exec.Cmd) error {
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

// proc is one node's process and its successors after restarts.
type proc struct {
	id      string
	argv    []string // full command line (ip netns exec ... crownd ...)
	env     []string
	logPath string

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{}
	state      string
	expectExit bool
	starts     int
	unexpected []string
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running", p.id)
		}
	}
	lf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(lf, "==== crown-chaos: start #%d of %s at %s: %s\n", p.starts, p.id,
		time.Now().Format(time.RFC3339Nano), strings.Join(p.argv, " "))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := startChild(cmd); err != nil {
		lf.Close()
		return fmt.Errorf("%s: start: %w", p.id, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.state, p.expectExit = cmd, done, Running, false
	n := p.starts
	go func() {
		err := cmd.Wait()
		lf.Close()
		p.mu.Lock()
		if !p.expectExit {
			p.unexpected = append(p.unexpected, fmt.Sprintf("%s: process #%d exited by itself at %s (%v)",
				p.id, n, time.Now().Format("15:04:05.000"), err))
			p.state = Stopped
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *proc) getState() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == "" {
		return Stopped
	}
	return p.state
}

func (p *proc) signal(sig syscall.Signal, expectExit bool) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if expectExit {
		p.expectExit = true
	}
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s was never started", p.id)
	}
	select {
	case <-done:
		return fmt.Errorf("%s is not running", p.id)
	default:
	}
	return cmd.Process.Signal(sig)
}

func (p *proc) wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func (p *proc) kill() error {
	if err := p.signal(syscall.SIGKILL, true); err != nil {
		return err
	}
	if !p.wait(10 * time.Second) {
		return fmt.Errorf("%s survived SIGKILL for 10s", p.id)
	}
	p.setState(Killed)
	return nil
}

func (p *proc) terminate() error {
	if p.getState() == Paused {
		_ = p.signal(syscall.SIGCONT, false)
	}
	if err := p.signal(syscall.SIGTERM, true); err != nil {
		return err
	}
	if !p.wait(40 * time.Second) {
		_ = p.signal(syscall.SIGKILL, true)
		p.wait(10 * time.Second)
		p.setState(Killed)
		return fmt.Errorf("%s did not exit within 40s of SIGTERM (killed)", p.id)
	}
	p.setState(Stopped)
	return nil
}

func (p *proc) pause() error {
	if err := p.signal(syscall.SIGSTOP, false); err != nil {
		return err
	}
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for !allStopped(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not stopped 5s after SIGSTOP", p.id)
		}
		time.Sleep(2 * time.Millisecond)
	}
	p.setState(Paused)
	return nil
}

func (p *proc) resume() error {
	if err := p.signal(syscall.SIGCONT, false); err != nil {
		return err
	}
	p.setState(Running)
	return nil
}

func (p *proc) setState(s string) {
	p.mu.Lock()
	p.state = s
	p.mu.Unlock()
}

// forceKill never fails: the cleanup path.
func (p *proc) forceKill() {
	if p.signal(syscall.SIGKILL, true) == nil {
		p.wait(10 * time.Second)
		p.setState(Killed)
	}
}

func (p *proc) unexpectedExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.unexpected...)
}

// allStopped reports whether every thread of pid is stopped (SIGSTOP is
// delivered asynchronously).
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue
		}
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
