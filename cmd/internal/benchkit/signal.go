package benchkit

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// Interruptible returns a context that SIGINT or SIGTERM cancels, and a
// function to call once the report is out: when a signal arrived it
// restores the default handler and sends the signal to the process again,
// so that it dies of that signal and a calling shell script stops too
// (bash ignores a Ctrl-C that its foreground child handled and survived).
func Interruptible(parent context.Context) (ctx context.Context, reraise func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	var got atomic.Value
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			got.Store(s)
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
		close(done)
		signal.Stop(ch)
		cancel()
		if s, ok := got.Load().(os.Signal); ok {
			signal.Reset(s)
			if p, err := os.FindProcess(os.Getpid()); err == nil && p.Signal(s) == nil {
				time.Sleep(2 * time.Second) // dies here, before any exit code
			}
		}
	}
}
