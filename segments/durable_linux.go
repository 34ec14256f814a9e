package segments

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// syncRange writes back the dirty pages of f in [off, off+n) and waits for
// them (not a device cache flush: the fsync after the last range does that).
func syncRange(f *os.File, off, n int64) error {
	err := unix.SyncFileRange(int(f.Fd()), off, n,
		unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	if err != nil {
		return fmt.Errorf("sync_file_range %s: %w", f.Name(), err)
	}
	return nil
}

// writebackSupported: startWriteback does something here.
const writebackSupported = true

// startWriteback asks the kernel to start writing f's dirty pages and does
// not wait for them.
func startWriteback(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}); err != nil {
		return err
	}
	return serr
}
