package fsm

import (
	"strings"
	"testing"
)

// TestPushReportsPressure: a push that fits but leaves a bounded queue at
// 80 % or more of a bound reports the fullest bound (ojs-queues.md 7.1);
// below 80 %, and on unbounded queues, nothing; a later push without
// pressure does not inherit an earlier one's.
func TestPushReportsPressure(t *testing.T) {
	m := newMachine(t)
	m.ojsOK(&OJSCreateQueue{Name: "cap", Config: QueueConfig{MaxDepth: i64(10), MaxSizeBytes: i64(1000)}})
	if r := m.push(items("cap", "p", "1", "2", "3", "4", "5", "6", "7")...); r.Pressure != nil {
		t.Fatalf("7 of 10: %+v", r.Pressure)
	}
	r := m.push(items("cap", "p", "8")...)
	if p := r.Pressure; p == nil || *p != (Pressure{Queue: "cap", Depth: 8, Bound: 10, BoundType: "depth"}) || p.Ratio() != 0.8 {
		t.Fatalf("8 of 10: %+v", r.Pressure)
	}
	// Size closer to its bound than depth: 900 of 1,000 bytes against 9 of 10.
	if r := m.push(item("cap", "p", "9", `"`+strings.Repeat("x", 882)+`"`)); r.Pressure == nil || r.Pressure.BoundType != "size" || r.Pressure.Ratio() < 0.9 {
		t.Fatalf("size: %+v", r.Pressure)
	}
	if r := m.push(items("plain", "p", "x")...); r.Pressure != nil {
		t.Fatalf("an unbounded queue: %+v", r.Pressure)
	}
	// PushAs (an OJS principal) reports it too.
	if r := m.apply(&PushAs{Principal: "svc", Items: items("cap", "p", "10")})[0].(*PushResult); r.Pressure == nil || r.Pressure.Depth != 10 {
		t.Fatalf("push as: %+v", r.Pressure)
	}
}
