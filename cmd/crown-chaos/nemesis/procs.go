//go:build linux

package nemesis

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/crownmq/crown/cmd/internal/childproc"
)

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
	if err := childproc.Start(cmd); err != nil {
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
	if !childproc.WaitStopped(pid, 5*time.Second) {
		return fmt.Errorf("%s not stopped 5s after SIGSTOP", p.id)
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
