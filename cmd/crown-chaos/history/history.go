// Package history records what a chaos run did and saw: one JSON object per
// line (JSONL), written as operations complete, read back by the checker.
//
// Every client operation (push, pop, ack) is one record holding both its
// invocation and its completion time (nanoseconds since the run started,
// from a monotonic clock) and its outcome: ok (the broker answered and
// the operation took effect as answered), fail (it certainly did not take
// effect: refused connection, 4xx, 503 no_leader) or unknown (it may or may
// not have taken effect: timeout, reset, 503 unknown_outcome, ...). Faults,
// fault windows, recoveries, checkpoints and the final state are records of
// their own, so the file alone is enough to check a run.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Record kinds.
const (
	KindMeta       = "meta"       // first record: the run's configuration
	KindPush       = "push"       // a push request
	KindPop        = "pop"        // a pop request
	KindAck        = "ack"        // an ack/batch request
	KindNemesis    = "nemesis"    // one scenario line executed
	KindWindow     = "window"     // a fault window, written when it closes
	KindRecovery   = "recovery"   // recovery after a window closed
	KindScenario   = "scenario"   // a scenario's start and end
	KindCheckpoint = "checkpoint" // a convergence check
	KindFinal      = "final"      // the state after healing and draining
	KindNote       = "note"       // free text (drain result, warnings)
)

// Outcomes.
const (
	OK      = "ok"
	Fail    = "fail"
	Unknown = "unknown"
)

// Item is one message in a push, pop or ack.
type Item struct {
	Partition   string `json:"p"`
	Seq         int64  `json:"s"`
	Txn         string `json:"t"`
	MsgID       string `json:"m,omitempty"`
	PartitionID string `json:"pid,omitempty"`
	// Push: the item's status (queued, duplicate). Ack: "" or the error of
	// a failed item.
	Status string `json:"st,omitempty"`
	// Ack: whether the broker reported the item applied.
	Success bool `json:"ok,omitempty"`
	// Pop: the delivery's retryCount and the sequence number found in the
	// payload (-1 when it could not be read).
	Retry   int   `json:"r,omitempty"`
	DataSeq int64 `json:"ds,omitempty"`
}

// NodeState is one node's answer in a checkpoint or the final state.
type NodeState struct {
	Node         string           `json:"node"`
	AppliedIndex uint64           `json:"applied_index"`
	Digest       string           `json:"digest"`
	Error        string           `json:"error,omitempty"`
	Totals       map[string]int64 `json:"totals,omitempty"` // "queue/partition" -> stored messages
}

// Meta describes the run.
type Meta struct {
	RunID      string            `json:"run_id"`
	Started    time.Time         `json:"started"`
	Backend    string            `json:"backend"`
	Seed       uint64            `json:"seed"`
	Nodes      map[string]string `json:"nodes"` // id -> URL
	Queues     []string          `json:"queues"`
	Partitions []string          `json:"partitions"`
	Groups     []string          `json:"groups"` // "" is queue mode
	// LeaseSeconds is the leaseSeconds of every pop: a message comes
	// again by lease expiry only this long after the pop that leased it.
	LeaseSeconds int      `json:"lease_seconds,omitempty"`
	Scenarios    []string `json:"scenarios"`
	Command      string   `json:"command,omitempty"`
	Host         string   `json:"host,omitempty"`
}

// Op is one record.
type Op struct {
	ID      int64  `json:"id"`
	Kind    string `json:"k"`
	Proc    string `json:"proc,omitempty"`
	Node    string `json:"node,omitempty"`
	Start   int64  `json:"t0"`
	End     int64  `json:"t1,omitempty"`
	Outcome string `json:"o,omitempty"`
	Error   string `json:"err,omitempty"`
	Queue   string `json:"q,omitempty"`
	Group   string `json:"g,omitempty"`
	Lease   string `json:"lease,omitempty"`
	Status  string `json:"status,omitempty"` // ack: requested status
	Items   []Item `json:"items,omitempty"`

	// Nemesis, window, recovery, scenario, checkpoint, note.
	Label    string      `json:"label,omitempty"`
	Scenario string      `json:"scenario,omitempty"`
	Window   int         `json:"w,omitempty"`
	Targets  []string    `json:"targets,omitempty"`
	Recovery *Recovery   `json:"recovery,omitempty"`
	States   []NodeState `json:"states,omitempty"`
	Passed   *bool       `json:"passed,omitempty"`
	Meta     *Meta       `json:"meta,omitempty"`
}

// Recovery is how long the cluster took to serve again after a heal
// (nanoseconds after the window closed; -1: not within the limit).
type Recovery struct {
	Healthy int64  `json:"healthy"` // every running node answers /health 200 with one leader
	Writes  int64  `json:"writes"`  // a probe push through every running node succeeded
	Note    string `json:"note,omitempty"`
}

// Writer appends records to a history file from many goroutines.
type Writer struct {
	start  time.Time
	nextID atomic.Int64

	mu     sync.Mutex
	f      *os.File
	bw     *bufio.Writer
	enc    *json.Encoder
	err    error
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

// Create opens path for writing and starts the clock.
func Create(path string, start time.Time) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w := &Writer{start: start, f: f, bw: bw, enc: json.NewEncoder(bw), stop: make(chan struct{}), done: make(chan struct{})}
	go w.flusher()
	return w, nil
}

func (w *Writer) flusher() {
	defer close(w.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			if !w.closed && w.err == nil {
				w.err = w.bw.Flush()
			}
			w.mu.Unlock()
		}
	}
}

// Now is the time since the run started, the clock of every record.
func (w *Writer) Now() int64 { return int64(time.Since(w.start)) }

// Write assigns op an id and appends it.
func (w *Writer) Write(op *Op) {
	op.ID = w.nextID.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.err != nil {
		return
	}
	w.err = w.enc.Encode(op)
}

// Close flushes and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return w.err
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.bw.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// Read reads every record of a history.
func Read(r io.Reader) ([]Op, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	var ops []Op
	for {
		var op Op
		err := dec.Decode(&op)
		if err == io.EOF {
			return ops, nil
		}
		if err != nil {
			// A run killed mid-write leaves a torn last line: keep what came before.
			if len(ops) > 0 && (err == io.ErrUnexpectedEOF || strings.Contains(err.Error(), "unexpected end")) {
				return ops, nil
			}
			return ops, fmt.Errorf("history record %d: %w", len(ops)+1, err)
		}
		ops = append(ops, op)
	}
}

// ReadFile reads a history file.
func ReadFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f)
}

// ParseTxn reads the sequence number at the end of a transaction id written
// by the workload ("<run>.<queue>.<partition>.<seq>"); ok is false for ids
// of another form.
func ParseTxn(txn string) (seq int64, ok bool) {
	i := strings.LastIndexByte(txn, '.')
	if i < 0 || i == len(txn)-1 {
		return 0, false
	}
	var n int64
	for _, c := range txn[i+1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n > 1<<40 {
			return 0, false
		}
	}
	return n, true
}

// Txn builds the transaction id of message seq of (queue, partition).
func Txn(run, queue, partition string, seq int64) string {
	return fmt.Sprintf("%s.%s.%s.%07d", run, queue, partition, seq)
}
