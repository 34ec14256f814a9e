package httpapi

import (
	"testing"

	"github.com/crownmq/crown/fsm"
)

// Fuzz targets for the request decoders of the administration and streams
// endpoints (groups.go, traces.go, system.go, streams.go), with the same
// contract as fuzz_test.go's: no panic, a well-formed 400 on refusal, and an
// accepted body yields a command the state machine validates and the log
// encoding carries.

// fuzzCommand checks what one decoder returned.
func fuzzCommand(t *testing.T, cmd fsm.Command, err *apiError) {
	t.Helper()
	if err != nil {
		checkRefusal(t, err)
		return
	}
	if err := cmd.Validate(); err != nil {
		t.Fatalf("decoder accepted a command the state machine refuses: %v", err)
	}
	b, encErr := fsm.AppendEntry(nil, &fsm.Entry{Stamp: 1, Origin: "n1", Commands: []fsm.Command{cmd}})
	if encErr != nil {
		t.Fatalf("encode: %v", encErr)
	}
	e, decErr := fsm.DecodeEntry(b)
	if decErr != nil || len(e.Commands) != 1 {
		t.Fatalf("decode: %v (%d commands)", decErr, len(e.Commands))
	}
	if m, ok := e.Commands[0].(*fsm.Malformed); ok {
		t.Fatalf("command did not decode: %s", m.Err)
	}
	if e.Commands[0].Type() != cmd.Type() {
		t.Fatalf("type %d decoded as %d", cmd.Type(), e.Commands[0].Type())
	}
}

func FuzzParseStreamCycle(f *testing.F) {
	for _, s := range []string{
		`{"query_id":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09","partition_id":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a0a","consumer_group":"g",` +
			`"state_ops":[{"type":"upsert","key":"win:1","value":{"sum":1,"windowEnd":5}},{"type":"delete","key":"win:0"}],` +
			`"push_items":[{"queue":"sink","partition":"p","payload":{"x":1}}],` +
			`"ack":{"transactionId":"t","leaseId":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a0b","status":"completed","count":10},"release_lease":false}`,
		`{"query_id":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09","partition_id":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a0a","ack":null}`,
		`{"query_id":"x"}`, `{}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, _, err := parseStreamCycle(body, fuzzLimits)
		if err != nil {
			fuzzCommand(t, nil, err)
			return
		}
		checkPushItems(t, c.Items, fuzzLimits)
		fuzzCommand(t, c, nil)
	})
}

func FuzzParseStreamRegister(f *testing.F) {
	for _, s := range []string{
		`{"name":"orders.per_customer","source_queue":"orders","sink_queue":"totals","config_hash":"sha256:3f2a","reset":false}`,
		`{"name":"q","source_queue":"s","config_hash":"h","sink_queue":null,"reset":true}`, `{"name":""}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseStreamRegister(body)
		if err != nil {
			fuzzCommand(t, nil, err)
			return
		}
		fuzzCommand(t, c, nil)
	})
}

func FuzzParseStreamStateGet(f *testing.F) {
	for _, s := range []string{
		`{"query_id":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09","partition_id":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a0a","keys":["a","b"],"key_prefix":"agg","ripe_at_or_before":1715850060000}`,
		`{"query_id":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09","partition_id":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a0a","ripe_at_or_before":"12"}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := parseStreamStateGet(body); err != nil {
			checkRefusal(t, err)
		}
	})
}

func FuzzParseAddTrace(f *testing.F) {
	for _, s := range []string{
		`{"transactionId":"t","partitionId":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09","consumerGroup":"billing","traceNames":["a","b"],"eventType":"info","data":{"step":1}}`,
		`{"transactionId":"t","partitionId":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09","traceNames":"one","data":null}`, `{"data":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseAddTrace(body)
		if err != nil {
			fuzzCommand(t, nil, err)
			return
		}
		fuzzCommand(t, c, nil)
	})
}

func FuzzParseSeek(f *testing.F) {
	for _, s := range []string{`{"toEnd":true}`, `{"timestamp":"2026-05-16T08:00:00Z"}`, `{"toEnd":false,"timestamp":"2026-05-16"}`, `{}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseSeek(body)
		if err != nil {
			fuzzCommand(t, nil, err)
			return
		}
		c.Group, c.Queue = "g", "q" // the handler fills them from the path
		fuzzCommand(t, c, nil)
	})
}

func FuzzParseEnabled(f *testing.F) {
	for _, s := range []string{`{"enabled":true}`, `{"enabled":"false"}`, `{}`, `{"enabled":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := parseEnabled(body); err != nil {
			checkRefusal(t, err)
		}
	})
}

func FuzzParseSubscriptionTimestamp(f *testing.F) {
	for _, s := range []string{`{"subscriptionTimestamp":"2026-05-01T00:00:00Z"}`, `{"subscriptionTimestamp":5}`, `{}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ts, err := parseSubscriptionTimestamp(body)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if ts.text == "" {
			t.Fatalf("accepted an empty timestamp as %v", ts.Time)
		}
	})
}

func FuzzParseExtend(f *testing.F) {
	for _, s := range []string{`{"seconds":120}`, `{}`, `{"seconds":null}`, `{"seconds":0}`, `{"seconds":1e3}`, `{"seconds":"5"}`, `[]`, ``} {
		f.Add([]byte(s), "6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09")
	}
	f.Add([]byte(`{"seconds":9223372036854775807}`), "nope")
	f.Fuzz(func(t *testing.T, body []byte, leaseID string) {
		c, ok, err := parseExtend(body, leaseID)
		if err != nil {
			fuzzCommand(t, nil, err)
			return
		}
		if c.Seconds <= 0 {
			t.Fatalf("extension of %d seconds accepted", c.Seconds)
		}
		if _, valid := parseUUID(leaseID); ok != valid {
			t.Fatalf("lease id %q: ok %v", leaseID, ok)
		}
		fuzzCommand(t, c, nil)
	})
}

func FuzzParseAck(f *testing.F) {
	for _, s := range []string{
		`{"transactionId":"t","partitionId":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09","status":"completed","consumerGroup":"g"}`,
		`{"transactionId":"t","partitionId":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09","status":"failed","error":"e","leaseId":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a0a"}`,
		`{"transactionId":"t"}`, `{}`, `[]`, `{"transactionId":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseAck(body)
		if err != nil {
			fuzzCommand(t, nil, err)
			return
		}
		if len(c.Items) != 1 {
			t.Fatalf("%d items from one acknowledgment", len(c.Items))
		}
		fuzzCommand(t, c, nil)
	})
}

func FuzzDecodeMember(f *testing.F) {
	for _, s := range []string{`{"id":"node4","raft_addr":"10.0.0.4:7632","http_addr":"http://10.0.0.4:6632"}`,
		`{"id":"node4"}`, `{"id":""}`, `{"id":4}`, `{}`, `[]`} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, needRaft bool) {
		m, err := decodeMember(body, needRaft)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if m.ID == "" || (needRaft && m.RaftAddr == "") {
			t.Fatalf("member %+v accepted (raft address required: %v)", m, needRaft)
		}
	})
}
