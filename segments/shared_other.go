//go:build !unix

package segments

import "os"

// shared assumes a file may have other names: this platform's file
// information does not count links.
func shared(os.FileInfo) bool { return true }
