package fsm

import (
	"os"
	"path/filepath"
	"testing"
)

// A state database that may be torn is set aside, not removed: the node
// rebuilds from snapshot and log, and should what that needs be missing
// (raftnode checks after this), the old file is still there. Before, an
// unreadable marker or a machine crash removed it at once. An earlier copy
// set aside and not yet dropped is the one kept.
func TestDiscardSetsTheStateAside(t *testing.T) {
	rec := record(t, 17, 40)
	dir := filepath.Join(t.TempDir(), "state")
	open := func(boot string) *FSM {
		t.Helper()
		f, err := Open(Config{Dir: dir, NodeID: "n1", BootID: boot})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := open("boot-1")
	f.ApplyBatch(rec.logs)
	want := rec.digests[len(rec.logs)-1]
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, markerFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := open("boot-1")
	if g.AppliedIndex() != 0 {
		t.Fatalf("state with an unreadable marker kept: applied %d", g.AppliedIndex())
	}
	aside := g.DiscardedDir()
	checkAside := func() {
		t.Helper()
		a, err := Open(Config{Dir: aside, NodeID: "n1"})
		if err != nil {
			t.Fatalf("open the state set aside: %v", err)
		}
		defer a.Close()
		if _, d := digestOf(t, a); d != want {
			t.Fatal("the state set aside is not the state the node had")
		}
	}
	checkAside()
	// A second discard before the first copy was dropped (the machine
	// crashed again while the node rebuilt): the first copy stays.
	g.ApplyBatch(rec.logs[:5])
	if err := g.store.Close(); err != nil {
		t.Fatal(err)
	}
	g.store = nil
	h := open("boot-2")
	if h.AppliedIndex() != 0 {
		t.Fatalf("unsynced state kept across a machine crash: applied %d", h.AppliedIndex())
	}
	checkAside()
	if err := h.DropDiscarded(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(aside); !os.IsNotExist(err) {
		t.Fatalf("the state set aside is still there after DropDiscarded: %v", err)
	}
	if err := h.DropDiscarded(); err != nil {
		t.Fatalf("DropDiscarded with nothing set aside: %v", err)
	}
	h.Close()
}
