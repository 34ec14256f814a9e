package fsm

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A state directory that is a mount point of its own cannot be renamed:
// a state that may be torn is then removed, as before there was a way to
// set it aside, rather than keep the node from starting.
func TestDiscardOfAMountedStateDirectoryRemovesIt(t *testing.T) {
	base := t.TempDir()
	dir, backing := filepath.Join(base, "state"), filepath.Join(base, "volume")
	for _, d := range []string{dir, backing} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mount(backing, dir, "", syscall.MS_BIND, ""); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("bind mount refused (needs root): %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	rec := record(t, 19, 20)
	f, err := Open(Config{Dir: dir, NodeID: "n1", BootID: "boot-1"})
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch(rec.logs)
	if err := f.store.Close(); err != nil { // a crash: no clean close
		t.Fatal(err)
	}
	f.store = nil
	g, err := Open(Config{Dir: dir, NodeID: "n1", BootID: "boot-2"})
	if err != nil {
		t.Fatalf("open after a machine crash with the state directory mounted: %v", err)
	}
	defer g.Close()
	if g.AppliedIndex() != 0 {
		t.Fatalf("unsynced state kept across a machine crash: applied %d", g.AppliedIndex())
	}
	if _, err := os.Stat(g.DiscardedDir()); !os.IsNotExist(err) {
		t.Fatalf("a copy was set aside although the directory could not be renamed: %v", err)
	}
}
