package segments

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// syncRange writes back the dirty pages of f in [off, off+n) and waits for
// them (not a device cache flush: the fsync after the last range does that).
func syncRange(f *os.File, off, n int64) error {
	err := syncFileRange(f, off, n,
		unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	if err != nil {
		return fmt.Errorf("sync_file_range %s: %w", f.Name(), err)
	}
	return nil
}

// syncFileRange calls sync_file_range on f's descriptor, which it holds
// for the call: a file closed meanwhile fails instead of the number
// reaching whatever file reused it.
func syncFileRange(f *os.File, off, n int64, flags int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SyncFileRange(int(fd), off, n, flags) }); err != nil {
		return err
	}
	return serr
}

// writebackSupported: startWriteback does something here.
const writebackSupported = true

// startWriteback asks the kernel to start writing f's dirty pages and does
// not wait for them.
func startWriteback(f *os.File) error {
	return syncFileRange(f, 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
