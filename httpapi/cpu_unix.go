//go:build unix

package httpapi

import (
	"syscall"
	"time"
)

// processCPU is the user and system CPU time this process has used.
func processCPU() (user, system time.Duration, ok bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0, false
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), true
}
