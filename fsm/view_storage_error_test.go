package fsm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crownmq/crown/segments"
)

// A read view that meets a damaged segment fails alone, and says so: its
// error (a 500's message) read "fsm: apply failed, state machine stopped",
// the words of a stopped node, while the node went on serving.
func TestReadViewStorageErrorDoesNotClaimTheMachineStopped(t *testing.T) {
	m := newMachine(t)
	m.push(items("orders", "p-1", "tx-1", "tx-2")...)
	if _, err := m.f.ListMessages(MessageQuery{}, m.now.UnixMicro()); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(m.f.cfg.Dir, "fsm.db.blobs-*", "*.seg"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segment files %v, %v", segs, err)
	}
	// The segment's version byte: its header no longer decodes.
	fh, err := os.OpenFile(segs[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt([]byte{0x07}, 0); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	_, _, err = m.f.QueueMessages("orders", 10, 0, m.now.UnixMicro())
	if !errors.Is(err, segments.ErrCorrupt) || strings.Contains(err.Error(), "stopped") {
		t.Fatalf("view of a damaged segment: %v; want segments.ErrCorrupt, not a stopped machine", err)
	}
}
