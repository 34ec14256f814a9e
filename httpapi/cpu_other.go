//go:build !unix

package httpapi

import "time"

// processCPU is not measured where getrusage does not exist; the metrics
// leave Queen's CPU counters out there.
func processCPU() (user, system time.Duration, ok bool) { return 0, 0, false }
