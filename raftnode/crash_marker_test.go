package raftnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/crownmq/crown/fsm"
)

// startUnderBoot starts a node whose state machine records boot as the
// kernel's boot id. The caller shuts the node down (the crash it stages);
// the state machine is closed, uncleanly or not, at the test's end.
func startUnderBoot(t *testing.T, cfg Config, boot string) *testNode {
	t.Helper()
	f, err := fsm.Open(fsm.Config{Dir: filepath.Join(cfg.DataDir, "state"), NodeID: cfg.NodeID, BootID: boot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	n, err := New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	return &testNode{id: cfg.NodeID, addr: cfg.RaftAddr, dir: cfg.DataDir, fsm: f, node: n}
}

// copyTreeAsCrashed copies a data directory as a machine crash leaves it: the
// files as they are, whatever process still has them open.
func copyTreeAsCrashed(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

// TestStorageMachineCrashDiscardsUnsyncedStateWhateverTheNewSyncMode
// runs a node without --fsm-sync under boot "boot-A", stops it without a
// clean close of its state (the machine crashed), and opens a copy of its
// data directory under another boot id. Its state file was written without
// fsync, so it may be torn and must be discarded (then rebuilt from the
// newest snapshot and the log), whether or not the operator restarts the
// node with --fsm-sync: what counts is whether the crashed session synced.
//
// fsm/DESIGN.md, Durability 3; README "Durability: when fsync happens".
func TestStorageMachineCrashDiscardsUnsyncedStateWhateverTheNewSyncMode(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig("n1", freeAddr(t), dir, nil)
	tn := startUnderBoot(t, cfg, "boot-A")
	f, n := tn.fsm, tn.node
	waitLeader(t, tn)
	for i := 0; i < 5; i++ {
		if _, _, err := n.Propose(context.Background(), push("q", fmt.Sprintf("c%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if f.AppliedIndex() == 0 {
		t.Fatal("nothing applied")
	}
	// The machine crashes now: the state was never closed cleanly.
	for _, sync := range []bool{false, true} {
		crashed := filepath.Join(t.TempDir(), "node")
		copyTreeAsCrashed(t, dir, crashed)
		g, err := fsm.Open(fsm.Config{Dir: filepath.Join(crashed, "state"), NodeID: "n1", BootID: "boot-B", Sync: sync})
		if err != nil {
			t.Fatal(err)
		}
		applied := g.AppliedIndex()
		g.Close()
		if applied != 0 {
			t.Errorf("reopened after a machine crash with Sync=%v: kept the state file written without fsync (applied index %d), want it discarded (0)", sync, applied)
		}
	}
}

// TestStorageMarkerIsUncleanBeforeOpenWritesTheStateFile opens, after
// a clean close under boot "boot-A", a state file of schema 2, which
// segments.Open migrates in place without fsync (the transaction-id index
// is dropped and rebuilt in batches of 65,536 entries). One entry of the
// old index is damaged so that the migration stops after its first
// committed transaction, as a machine crash would stop it. The state file
// has then been rewritten without fsync, so the marker must already say
// unclean: fsm.Open writes it before segments.Open, or after a machine
// crash in that window the next boot would trust a file whose unsynced
// pages may be torn.
//
// fsm/DESIGN.md, Durability 3: "A machine crash can lose or tear unsynced
// pages. fsm.state records the kernel boot id and whether the last close
// was clean; if the machine rebooted while the file was open without a
// clean close, the file is discarded". segments/DESIGN.md: "Schema 2
// files and snapshots are migrated when opened".
func TestStorageMarkerIsUncleanBeforeOpenWritesTheStateFile(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state")
	copyTreeAsCrashed(t, filepath.Join("..", "segments", "testdata", "schema2"), stateDir)
	if err := os.Rename(filepath.Join(stateDir, "state.db"), filepath.Join(stateDir, "fsm.db")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(stateDir, "state.db.blobs-1"), filepath.Join(stateDir, "fsm.db.blobs-1")); err != nil {
		t.Fatal(err)
	}
	// Damage the last entry of the schema 2 index (bucket "txids": values
	// of 24 bytes), so the migration's second transaction fails.
	db, err := bolt.Open(filepath.Join(stateDir, "fsm.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var before uint64
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("txids"))
		if b == nil {
			return fmt.Errorf("fixture without its schema 2 index")
		}
		k, _ := b.Cursor().Last()
		return b.Put(bytes.Clone(k), []byte("short"))
	})
	if err == nil {
		err = db.View(func(tx *bolt.Tx) error { before = uint64(tx.ID()); return nil })
	}
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The previous session closed cleanly under boot-A.
	if err := os.WriteFile(filepath.Join(stateDir, "fsm.state"), []byte(`{"boot_id":"boot-A","clean":true}`), 0o600); err != nil {
		t.Fatal(err)
	}

	if f, err := fsm.Open(fsm.Config{Dir: stateDir, NodeID: "n1", BootID: "boot-A"}); err == nil {
		f.Close()
		t.Fatal("the damaged schema 2 index migrated")
	}

	db, err = bolt.Open(filepath.Join(stateDir, "fsm.db"), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var after uint64
	db.View(func(tx *bolt.Tx) error { after = uint64(tx.ID()); return nil })
	db.Close()
	if after == before {
		t.Fatal("the interrupted open wrote nothing to the state file; the test proves nothing")
	}
	b, err := os.ReadFile(filepath.Join(stateDir, "fsm.state"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		BootID string `json:"boot_id"`
		Clean  bool   `json:"clean"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Clean {
		t.Errorf("state file rewritten without fsync (bbolt transaction %d -> %d) while the marker says %s: after a machine crash here the next boot trusts it", before, after, b)
	}
}

// After a machine crash the state set aside is dropped once the node has
// what the rebuild needs, and kept, named in the error, when it has not:
// here the snapshots the compacted log relies on are gone, so the node
// cannot start, and the state it had is still on disk. Before, the state
// file was removed before the snapshots were looked at.
func TestStorageStateSetAsideUntilTheRebuildHasWhatItNeeds(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig("n1", freeAddr(t), dir, nil)
	cfg.TrailingLogs = 1
	tn := startUnderBoot(t, cfg, "boot-A")
	n := tn.node
	snapshotAfterPushes(t, tn, 10)
	for i := range 3 {
		if _, _, err := n.Propose(context.Background(), push("q", fmt.Sprintf("after%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	start := func(withSnapshots bool) (*fsm.FSM, string, error) {
		crashed := filepath.Join(t.TempDir(), "node")
		copyTreeAsCrashed(t, dir, crashed)
		if !withSnapshots {
			if err := os.RemoveAll(filepath.Join(crashed, "raft", "snapshots")); err != nil {
				t.Fatal(err)
			}
		}
		g, err := fsm.Open(fsm.Config{Dir: filepath.Join(crashed, "state"), NodeID: "n1", BootID: "boot-B"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		c := cfg
		c.DataDir, c.RaftAddr = crashed, freeAddr(t)
		m, err := New(c, g)
		if err == nil {
			t.Cleanup(func() { m.Shutdown() })
		}
		return g, g.DiscardedDir(), err
	}
	_, aside, err := start(false)
	if err == nil || !strings.Contains(err.Error(), aside) {
		t.Fatalf("start without the snapshots: %v, want an error naming %s", err, aside)
	}
	if _, serr := os.Stat(filepath.Join(aside, "fsm.db")); serr != nil {
		t.Fatalf("the state set aside is gone after the failed start: %v", serr)
	}
	_, aside, err = start(true)
	if err != nil {
		t.Fatal(err)
	}
	if _, serr := os.Stat(aside); !os.IsNotExist(serr) {
		t.Fatalf("the state set aside is still there after the node started: %v", serr)
	}
}
