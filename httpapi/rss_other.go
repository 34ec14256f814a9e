//go:build !linux

package httpapi

// residentBytes is not measured without /proc; GET /metrics then reports
// the memory the Go runtime has obtained from the system instead.
func residentBytes() (uint64, bool) { return 0, false }
