//go:build unix

package segments

import (
	"os"
	"syscall"
)

// shared reports whether a file may have other names (hard links); when
// the platform cannot tell, it assumes so.
func shared(st os.FileInfo) bool {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Nlink > 1
	}
	return true
}
