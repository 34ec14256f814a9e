package httpapi

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/crownmq/crown/fsm"
	"github.com/crownmq/crown/httpapi/jsonscan"
)

// parseAckBatchTwoPass is parseAckBatch as it was before it read the body in
// one pass: a validation of the whole body, then walks of what it validated.
// FuzzParseAckBatchOnePass requires the same answer from both.
func parseAckBatchTwoPass(body []byte, lim Limits) (*fsm.Ack, *apiError) {
	m, err := decodeObject(body, "")
	if err != nil {
		return nil, err
	}
	raw := m["acknowledgments"]
	if len(raw) == 0 || raw[0] != '[' {
		return nil, badRequest(absentOr(raw), "acknowledgments", "acknowledgments array is required")
	}
	g, err := groupOf(m["consumerGroup"], "consumerGroup")
	if err != nil {
		return nil, err
	}
	c := &fsm.Ack{Group: g, Items: make([]fsm.AckItem, 0, 16)}
	var aerr *apiError
	const (
		txMsg   = "Each acknowledgment must have a valid transactionId string"
		partMsg = "Each acknowledgment must have a valid partitionId string"
	)
	serr := jsonscan.ArrayValid(raw, func(elem []byte) error {
		i := len(c.Items)
		if i == lim.MaxItems {
			aerr = badRequest(codeLimit, "acknowledgments", "acknowledgments holds more than %d items; the limit is %d per request", lim.MaxItems, lim.MaxItems)
			return aerr
		}
		var r rawAck
		if jsonscan.ObjectValidRaw(elem, r.member) != nil {
			aerr = badRequest(codeInvalidField, fmt.Sprintf("acknowledgments[%d]", i), "Each acknowledgment must be an object")
			return aerr
		}
		it, e := r.item("", txMsg, partMsg)
		if e != nil {
			// The common case needs no field path: build it only for an
			// error, by reading the item again with it.
			_, aerr = r.item(fmt.Sprintf("acknowledgments[%d].", i), txMsg, partMsg)
			return aerr
		}
		c.Items = append(c.Items, it)
		return nil
	})
	if aerr != nil {
		return nil, aerr
	}
	if serr != nil {
		return nil, badRequest(codeInvalidJSON, "acknowledgments", "Invalid JSON: %v", serr)
	}
	return c, nil
}

// FuzzParseAckBatchOnePass: on any body, the one-pass parseAckBatch gives
// what validating the body first gave: the same command, or the same
// refusal (status, code, field and message).
func FuzzParseAckBatchOnePass(f *testing.F) {
	const pid = "6d2f1c3a-0b9e-4f7d-8c6a-5e4d3c2b1a09"
	ok := `{"transactionId":"t","partitionId":"` + pid + `"}`
	for _, s := range []string{
		`{"consumerGroup":"g","acknowledgments":[{"transactionId":"t","partitionId":"` + pid + `","leaseId":"01963a61-5b6c-7d8e-9f01-a2b3c4d5e6f7","status":"failed","error":"x"}]}`,
		`{"acknowledgments":[]}`, `{"acknowledgments":[{"transactionId":"t"}]}`, `{"acknowledgments":[1]}`,
		`{"acknowledgments":[` + ok + `,` + ok + `,` + ok + `]}`, `{"acknowledgments":[` + ok + `],"acknowledgments":{}}`,
		`{"acknowledgments":{},"acknowledgments":[` + ok + `]}`, `{"acknowledgments":[1,]}`, `[1,]`, `[]`, ``, ` {} x`,
		`{"consumerGroup":5,"acknowledgments":[1]}`, `{"acknowledgments":[{"transactionId":5}],"x":[}`,
		`{"acknowledgments":[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]}`, `{"a\u0063knowledgments":[]}`,
		`{"acknowledgments":[{"transactionId":"t","transactionId":"u","partitionId":"` + pid + `"}]}`,
	} {
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, body []byte, maxItems int) {
		lim := fuzzLimits
		lim.MaxItems = 1 + (maxItems&0xff)%8
		got, gerr := parseAckBatch(body, lim)
		want, werr := parseAckBatchTwoPass(body, lim)
		if !reflect.DeepEqual(gerr, werr) {
			t.Fatalf("%q: refused with %+v, two passes with %+v", body, gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: read %+v, two passes %+v", body, got, want)
		}
	})
}

// The limit of nesting is the same in one pass (a limit_exceeded, not
// invalid JSON), deep inside an acknowledgment nobody reads too.
func TestParseAckBatchOnePassDepth(t *testing.T) {
	deep := strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth)
	body := []byte(`{"acknowledgments":[{"transactionId":"t","x":` + deep + `}]}`)
	_, gerr := parseAckBatch(body, DefaultLimits)
	_, werr := parseAckBatchTwoPass(body, DefaultLimits)
	if gerr == nil || gerr.Code != codeLimit || !reflect.DeepEqual(gerr, werr) {
		t.Fatalf("refused with %+v, two passes with %+v", gerr, werr)
	}
}

// FuzzParsePushOnePass: on any body, parsePush gives what decodeObject and
// parsePushItems give: the same items, or the same refusal. Items without a
// transaction id get a new UUIDv7 from each, so those two are compared by
// form only.
func FuzzParsePushOnePass(f *testing.F) {
	for _, s := range []string{
		`{"items":[{"queue":"q","partition":"p","payload":{"a":1},"transactionId":"t","traceId":"01963a5e-8a7b-7c3d-9e1f-2a3b4c5d6e7f"}]}`,
		`{"items":[{"queue":"q","payload":1},{"queue":"q","data":2}]}`, `{"items":[]}`, `{"items":null}`, `{}`, `[]`, `[1,]`, ``,
		`{"items":[{"queue":5}]}`, `{"items":[1,{"queue":"q"}]}`, `{"items":[{"queue":"q"}],"items":{}}`,
		`{"items":{},"items":[{"queue":"q"}]}`, `{"items":[{"queue":"q"},{"queue":"q"},{"queue":"q"}]}`,
		`{"items":[{"queue":5}],"x":[}`, `{"it\u0065ms":[{"queue":"q","queue":"r"}]}`, `{"items":[{"queue":"q","traceId":"x"}]}`,
	} {
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, body []byte, maxItems int) {
		lim := fuzzLimits
		lim.MaxItems = 1 + (maxItems&0xff)%8
		got, gerr := parsePush(body, lim)
		want, werr := parsePushBody(string(body), lim, false)
		if !reflect.DeepEqual(gerr, werr) {
			t.Fatalf("%q: refused with %+v, two passes with %+v", body, gerr, werr)
		}
		if gerr != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d items, two passes %d", body, len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.TxID != w.TxID {
				if _, gok := parseUUID(g.TxID); !gok || strings.Contains(string(body), g.TxID) {
					t.Fatalf("%q: item %d has transaction id %q, two passes %q", body, i, g.TxID, w.TxID)
				}
				g.TxID = w.TxID
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("%q: item %d is %+v, two passes %+v", body, i, g, w)
			}
		}
	})
}
