package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// runToExit runs crownd with node's command line until it exits (it must
// within 30 s) and returns its exit code and output.
func runToExit(t *testing.T, node *tc.Node) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tc.Binary(t), node.Args()...)
	cmd.Env = tc.ChildEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("crownd still running after 30 s on a broken data directory:\n%s", out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// A bbolt file or segment file cut short (a copy that ran out of space, a
// restored backup missing its tail) stops crownd with an error naming the
// file; the segment file's error named only its number. bbolt maps
// the file and, on open, walks every page its meta page counts: the state
// file killed the process with SIGBUS and the Raft log with a panic on one
// of bbolt's goroutines. The state file is derived data: removed, it is
// rebuilt from the snapshot and the log with every message.
func TestTruncatedFilesStopCrowndNamingThem(t *testing.T) {
	c := tc.Start(t, 1)
	node := c.Node(0)
	ctx := context.Background()
	var items []tc.PushItem
	for i := range 40 {
		items = append(items, tc.PushItem{Queue: "cut", Partition: fmt.Sprintf("p%d", i%4), Payload: map[string]int{"n": i}})
	}
	if _, err := node.Client().Push(ctx, items); err != nil {
		t.Fatal(err)
	}
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}

	for _, cut := range []struct {
		file, says string
		size       int64
	}{
		{filepath.Join("state", "fsm.db"), "truncated", 8192},
		{filepath.Join("raft", "log.db"), "truncated", 8192},
		{filepath.Join("state", "fsm.db.blobs-1", "0000000000000001.seg"), "committed", 10},
	} {
		f := cut.file
		path := filepath.Join(node.DataDir(), f)
		whole, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, cut.size); err != nil {
			t.Fatal(err)
		}
		code, out := runToExit(t, node)
		if code == 0 || !strings.Contains(out, path) || !strings.Contains(out, cut.says) ||
			strings.Contains(out, "goroutine ") {
			t.Fatalf("crownd on a truncated %s exited %d with:\n%s", f, code, out)
		}
		if err := os.WriteFile(path, whole, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// The procedure the README gives for a state file that does not open.
	if err := os.Truncate(filepath.Join(node.DataDir(), "state", "fsm.db"), 8192); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(node.DataDir(), "state")); err != nil {
		t.Fatal(err)
	}
	node.Restart()
	if _, err := c.WaitLeader(tc.LeaderTimeout); err != nil {
		t.Fatal(err)
	}
	got := 0
	for range 4 {
		msgs, err := node.Client().Pop(ctx, "cut", tc.PopParams{Batch: 100})
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
	}
	if got != len(items) {
		t.Fatalf("rebuilt state serves %d of %d messages", got, len(items))
	}
}

// A snapshot whose meta.json does not read is skipped by Raft's file store;
// the log was compacted behind it, so Raft found no entry after the
// snapshot it could read and panicked ("log not found") inside NewRaft.
// crownd now stops with an error naming the log and the snapshot directory.
func TestUnreadableSnapshotBehindACompactedLogStopsCrownd(t *testing.T) {
	c := tc.Start(t, 1, tc.WithArgs("--raft-snapshot-log-bytes", "4096", "--raft-trailing-logs", "4"))
	node := c.Node(0)
	ctx := context.Background()
	snapDir := filepath.Join(node.DataDir(), "raft", "snapshots")
	metas := func() []string {
		m, err := filepath.Glob(filepath.Join(snapDir, "*", "meta.json"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for b := 0; len(metas()) == 0 || b < 12; b++ {
		if b > 60 {
			t.Fatal("no snapshot taken")
		}
		var items []tc.PushItem
		for i := range 10 {
			items = append(items, tc.PushItem{Queue: "snap", Partition: fmt.Sprintf("p%d", i%3), Payload: map[string]any{"pad": strings.Repeat("x", 100)}})
		}
		if _, err := node.Client().Push(ctx, items); err != nil {
			t.Fatal(err)
		}
		if b%4 == 0 {
			time.Sleep(1100 * time.Millisecond) // the log-bytes trigger is checked every second
		}
	}
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, m := range metas() {
		if err := os.WriteFile(m, []byte(`{"Version":1,`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out := runToExit(t, node)
	if code == 0 || !strings.Contains(out, snapDir) || !strings.Contains(out, "unreadable") ||
		strings.Contains(out, "goroutine ") {
		t.Fatalf("crownd with its snapshots unreadable exited %d with:\n%s", code, out)
	}
}

// An entry of the Raft log that does not read (here its first piece's
// header, overwritten in place as a damaged disk block would leave it)
// stops crownd with an error naming the log. Raft reads every entry after
// the newest snapshot at start and panicked on the first it could not.
func TestUnreadableLogEntryStopsCrowndNamingTheLog(t *testing.T) {
	c := tc.Start(t, 1)
	node := c.Node(0)
	for i := range 5 {
		if _, err := node.Client().Push(context.Background(), []tc.PushItem{{Queue: "q", Payload: i}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(node.DataDir(), "raft", "log.db")
	store, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	// raftnode/piecelog.go: entry i's first piece is key 2^48 + 16i.
	const index = 3
	var first raft.Log
	if err := store.GetLog(1<<48+16*index, &first); err != nil {
		t.Fatal(err)
	}
	first.Data = []byte{0xff, 0xff}
	if err := errors.Join(store.StoreLog(&first), store.Close()); err != nil {
		t.Fatal(err)
	}
	code, out := runToExit(t, node)
	if code == 0 || !strings.Contains(out, path) || !strings.Contains(out, "does not read") ||
		strings.Contains(out, "goroutine ") {
		t.Fatalf("crownd on a log with an unreadable entry exited %d with:\n%s", code, out)
	}
}
