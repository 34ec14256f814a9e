package httpapi

import (
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/crownmq/crown/fsm"
)

// Fuzz targets for the decoders that see untrusted request bodies. Each must
// never panic, must refuse with a well-formed 400, and when it accepts a
// body must produce a command the state machine accepts (Validate passes,
// the command survives the log encoding) that respects the documented
// limits. Seed corpora live in testdata/fuzz/<FuzzName>/.

// fuzzLimits are small enough for the fuzzer to reach every limit.
var fuzzLimits = Limits{MaxBodyBytes: 1 << 20, MaxItems: 8, MaxPayloadBytes: 64, MaxPopBatch: 100}

var requestCodes = map[string]bool{codeInvalidJSON: true, codeInvalidField: true, codeMissingField: true, codeLimit: true}

// checkRefusal checks the shape of a decoder's error.
func checkRefusal(t *testing.T, err *apiError) {
	t.Helper()
	if err.Status != 400 || !requestCodes[err.Code] || err.Message == "" {
		t.Fatalf("malformed refusal {%d %s %q %q}", err.Status, err.Code, err.Field, err.Message)
	}
	if err.Code == codeLimit && err.Field == "" {
		t.Fatalf("limit refusal without a field: %q", err.Message)
	}
}

// roundTrip checks that cmd validates and survives the Raft log encoding.
func roundTrip(t *testing.T, cmd fsm.Command) {
	t.Helper()
	if err := cmd.Validate(); err != nil {
		t.Fatalf("decoder accepted a command the state machine refuses: %v", err)
	}
	b, err := fsm.AppendEntry(nil, &fsm.Entry{Stamp: 1, Origin: "n1", Commands: []fsm.Command{cmd}})
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	e, err := fsm.DecodeEntry(b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if len(e.Commands) != 1 {
		t.Fatalf("%d commands decoded", len(e.Commands))
	}
	if m, ok := e.Commands[0].(*fsm.Malformed); ok {
		t.Fatalf("command did not decode: %s", m.Err)
	}
	if !reflect.DeepEqual(normalize(e.Commands[0]), normalize(cmd)) {
		t.Fatalf("log round trip changed the command:\n got %+v\nwant %+v", e.Commands[0], cmd)
	}
}

// normalize maps empty slices to nil so that encodings that do not keep the
// difference compare equal.
func normalize(c fsm.Command) fsm.Command {
	items := func(its []fsm.PushItem) []fsm.PushItem {
		if len(its) == 0 {
			return nil
		}
		out := append([]fsm.PushItem(nil), its...)
		for i := range out {
			if len(out[i].Payload) == 0 {
				out[i].Payload = nil
			}
		}
		return out
	}
	switch c := c.(type) {
	case *fsm.Push:
		return &fsm.Push{Items: items(c.Items)}
	case *fsm.Ack:
		n := *c
		if len(n.Items) == 0 {
			n.Items = nil
		}
		return &n
	case *fsm.Transaction:
		n := &fsm.Transaction{Ops: append([]fsm.TxOp(nil), c.Ops...)}
		for i := range n.Ops {
			n.Ops[i].Items = items(n.Ops[i].Items)
		}
		return n
	}
	return c
}

// checkPushItems checks the invariants of accepted push items.
func checkPushItems(t *testing.T, items []fsm.PushItem, lim Limits) {
	t.Helper()
	if len(items) > lim.MaxItems {
		t.Fatalf("%d items accepted, limit %d", len(items), lim.MaxItems)
	}
	for i, it := range items {
		for name, v := range map[string]string{"queue": it.Queue, "partition": it.Partition, "transactionId": it.TxID} {
			if len(v) > fsm.MaxNameBytes {
				t.Fatalf("item %d: %s of %d bytes accepted", i, name, len(v))
			}
		}
		if it.TxID == "" {
			t.Fatalf("item %d: empty transaction id", i)
		}
		if !json.Valid(it.Payload) {
			t.Fatalf("item %d: payload is not JSON: %q", i, it.Payload)
		}
		if len(it.Payload) > lim.MaxPayloadBytes {
			t.Fatalf("item %d: payload of %d bytes accepted, limit %d", i, len(it.Payload), lim.MaxPayloadBytes)
		}
		if it.Encrypted || it.ProducerSub != "" {
			t.Fatalf("item %d: decoder set encrypted %v / producerSub %q", i, it.Encrypted, it.ProducerSub)
		}
		if !it.HasTrace && it.TraceID != ([16]byte{}) {
			t.Fatalf("item %d: trace id without HasTrace", i)
		}
	}
}

// arrayLen counts the elements of a JSON array member, -1 if it is not one.
func arrayLen(m map[string]json.RawMessage, key string) int {
	var a []json.RawMessage
	if json.Unmarshal(m[key], &a) != nil || a == nil {
		return -1
	}
	return len(a)
}

func FuzzParsePush(f *testing.F) {
	for _, s := range []string{
		`{"items":[{"queue":"q","partition":"p","payload":{"a":1},"transactionId":"t","traceId":"01963a5e-8a7b-7c3d-9e1f-2a3b4c5d6e7f"}]}`,
		`{"items":[]}`, `{"items":null}`, `{"items":[{"queue":5}]}`, `{}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodeObject(body, "")
		if err != nil {
			checkRefusal(t, err)
			return
		}
		items, err := parsePushItems(m["items"], "items", fuzzLimits, false)
		if err != nil {
			checkRefusal(t, err)
			if !strings.HasPrefix(err.Field, "items") {
				t.Fatalf("refusal names field %q", err.Field)
			}
			return
		}
		if n := arrayLen(m, "items"); n != len(items) {
			t.Fatalf("%d items decoded from an array of %d", len(items), n)
		}
		checkPushItems(t, items, fuzzLimits)
		roundTrip(t, &fsm.Push{Items: items})
	})
}

func FuzzParseConfigure(f *testing.F) {
	for _, s := range []string{
		`{"queue":"q","options":{"leaseTime":120,"retryLimit":"5","deadLetterQueue":"false","minPopWaitTime":99999}}`,
		`{"queue":"q","namespace":"n","task":"t","priority":-1}`, `{"queue":5}`, `{"queue":"q","options":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseConfigure(body)
		if err != nil {
			checkRefusal(t, err)
			if c != nil {
				t.Fatalf("command returned with a refusal")
			}
			return
		}
		for name, v := range map[string]string{"queue": c.Queue, "namespace": c.Namespace, "task": c.Task} {
			if len(v) > fsm.MaxNameBytes {
				t.Fatalf("%s of %d bytes accepted", name, len(v))
			}
		}
		o := c.Options
		for name, v := range map[string]int64{"leaseTime": o.LeaseTime, "retryLimit": o.RetryLimit,
			"delayedProcessing": o.DelayedProcessing, "windowBuffer": o.WindowBuffer, "retentionSeconds": o.RetentionSeconds,
			"completedRetentionSeconds": o.CompletedRetentionSeconds, "maxWaitTimeSeconds": o.MaxWaitTimeSeconds,
			"dedupWindowSeconds": o.DedupWindowSeconds, "maxSize": o.MaxSize, "retryDelay": o.RetryDelay, "ttl": o.TTL} {
			if v < 0 {
				t.Fatalf("negative %s %d accepted", name, v)
			}
		}
		if o.MinPopWaitTime < 0 || o.MinPopWaitTime > fsm.MaxMinPopWaitMillis {
			t.Fatalf("minPopWaitTime %d outside 0..60000", o.MinPopWaitTime)
		}
		roundTrip(t, c)
		// The configure echo, sent back, configures the same queue.
		if utf8.ValidString(c.Queue) && utf8.ValidString(c.Namespace) && utf8.ValidString(c.Task) {
			echo, _ := json.Marshal(map[string]any{"queue": c.Queue, "namespace": c.Namespace, "task": c.Task,
				"options": optionsJSON(c.Options, true)})
			again, err := parseConfigure(echo)
			if err != nil {
				t.Fatalf("echo %s refused: %s", echo, err.Message)
			}
			if !reflect.DeepEqual(again, c) {
				t.Fatalf("echo %s configures %+v, not %+v", echo, again, c)
			}
		}
	})
}

func FuzzParseAckBatch(f *testing.F) {
	for _, s := range []string{
		`{"consumerGroup":"g","acknowledgments":[{"transactionId":"t","partitionId":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09","leaseId":"01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7","status":"failed","error":"x"}]}`,
		`{"acknowledgments":[]}`, `{"acknowledgments":[{"transactionId":"t"}]}`, `{"acknowledgments":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseAckBatch(body, fuzzLimits)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		m, _ := decodeObject(body, "")
		if n := arrayLen(m, "acknowledgments"); n != len(c.Items) {
			t.Fatalf("%d acknowledgments decoded from an array of %d", len(c.Items), n)
		}
		checkAckGroup(t, c.Group)
		if len(c.Items) > fuzzLimits.MaxItems {
			t.Fatalf("%d acknowledgments accepted", len(c.Items))
		}
		for i := range c.Items {
			checkAckItem(t, &c.Items[i])
		}
		roundTrip(t, c)
	})
}

func checkAckGroup(t *testing.T, g string) {
	t.Helper()
	if g == "" || len(g) > fsm.MaxNameBytes {
		t.Fatalf("consumer group %q (%d bytes)", g, len(g))
	}
}

func checkAckItem(t *testing.T, it *fsm.AckItem) {
	t.Helper()
	if len(it.TxID) > fsm.MaxNameBytes {
		t.Fatalf("transactionId of %d bytes accepted", len(it.TxID))
	}
	if it.Status < fsm.AckCompleted || it.Status > fsm.AckUnknown {
		t.Fatalf("status %d", it.Status)
	}
	// Only an unknown status carries its text, and the text is unknown.
	if unknown := it.Status == fsm.AckUnknown; (unknown && ackStatus(it.StatusText) != fsm.AckUnknown) || (!unknown && it.StatusText != "") {
		t.Fatalf("status %d with text %q", it.Status, it.StatusText)
	}
	if !it.HasLease && it.LeaseID != ([16]byte{}) {
		t.Fatalf("lease id set without HasLease")
	}
}

func FuzzParseTransaction(f *testing.F) {
	for _, s := range []string{
		`{"operations":[{"type":"ack","transactionId":"t","partitionId":"6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09"},{"type":"push","items":[{"queue":"q","payload":1}]}],"requiredLeases":[]}`,
		`{"operations":[{"type":"push","queue":"q","data":{}}]}`, `{"operations":[]}`, `{"operations":[{"type":"x"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseTransaction(body, fuzzLimits)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		m, _ := decodeObject(body, "")
		if n := arrayLen(m, "operations"); n != len(c.Ops) || n == 0 || n > fuzzLimits.MaxItems {
			t.Fatalf("%d operations decoded from an array of %d", len(c.Ops), n)
		}
		for i := range c.Ops {
			op := &c.Ops[i]
			switch op.Kind {
			case fsm.OpPush:
				if len(op.Items) == 0 && arrayLen(mustObject(t, body, i), "items") != 0 {
					t.Fatalf("operation %d: push without items", i)
				}
				checkPushItems(t, op.Items, fuzzLimits)
			case fsm.OpAck:
				checkAckGroup(t, op.Group)
				checkAckItem(t, &op.Ack)
				if len(op.Items) != 0 {
					t.Fatalf("operation %d: ack with push items", i)
				}
			case fsm.OpInvalid:
				if op.Name == "" {
					t.Fatalf("operation %d: invalid without a reason", i)
				}
			default:
				t.Fatalf("operation %d: kind %d", i, op.Kind)
			}
		}
		roundTrip(t, c)
	})
}

// mustObject returns the members of operation i of a transaction body.
func mustObject(t *testing.T, body []byte, i int) map[string]json.RawMessage {
	t.Helper()
	m, err := decodeObject(body, "")
	if err != nil {
		t.Fatalf("accepted body does not decode: %s", err.Message)
	}
	var ops []json.RawMessage
	if json.Unmarshal(m["operations"], &ops) != nil || i >= len(ops) {
		t.Fatalf("operation %d not found", i)
	}
	op, err := decodeObject(ops[i], "")
	if err != nil {
		t.Fatalf("operation %d is not an object: %s", i, err.Message)
	}
	return op
}

// FuzzParseUUID: parseUUID reads ids from request bodies, paths and
// headers; on any input it agrees with hex decoding of the same digits
// (dashes at 8-4-4-4-12, or none), for both of its input types.
func FuzzParseUUID(f *testing.F) {
	for _, s := range []string{"01963a5e-8a7b-7c3d-9e1f-2a3b4c5d6e7f", "01963A5E8A7B7C3D9E1F2A3B4C5D6E7F",
		"01963a5e-8a7b-7c3d-9e1f-2a3b4c5d6e7g", "01963a5e_8a7b_7c3d_9e1f_2a3b4c5d6e7f", "", "-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, wok := [16]byte{}, false
		digits := s
		if len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' {
			digits = s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
		}
		if len(digits) == 32 && (len(s) == 32 || len(s) == 36) {
			if b, err := hex.DecodeString(digits); err == nil {
				want, wok = [16]byte(b), true
			}
		}
		if got, ok := parseUUID(s); ok != wok || got != want {
			t.Fatalf("parseUUID(%q) = %x, %v; want %x, %v", s, got, ok, want, wok)
		}
		if got, ok := parseUUID([]byte(s)); ok != wok || got != want {
			t.Fatalf("parseUUID([]byte(%q)) = %x, %v; want %x, %v", s, got, ok, want, wok)
		}
	})
}
