//go:build !linux

package segments

import "os"

// syncRange has no ranged write-back here; the fsync after the last range
// writes everything.
func syncRange(*os.File, int64, int64) error { return nil }

// writebackSupported: no asynchronous writeback request here.
const writebackSupported = false

func startWriteback(*os.File) error { return nil }
