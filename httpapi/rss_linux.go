//go:build linux

package httpapi

import (
	"bytes"
	"os"
	"strconv"
)

// residentBytes is this process's resident set size, the second field of
// /proc/self/statm (in pages): what the kernel holds in memory for it, which
// the Go runtime's own figures (heap and reserved address space) are not.
func residentBytes() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
}
