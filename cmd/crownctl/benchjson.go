package main

import (
	"fmt"

	"github.com/crownmq/crown/cmd/internal/benchkit"
	"github.com/crownmq/crown/httpapi/jsonscan"
)

// The load generator shares the machine with the servers it measures, so
// every cycle it spends is taken from them. With encoding/json, decoding
// pop answers (about 590 bytes per message in Queen's shape) and the ack
// round trip took 58 % of its CPU; these walk the answers with the
// server's own scanner instead, in one pass (jsonscan.Reader: each nested
// level walked again cost a quarter of the consumers' CPU), and build the
// ack body by hand.

// pushResult is one item of a push answer.
type pushResult struct{ Status, Error string }

// pushResults reads the array of a push answer.
func pushResults(body []byte) ([]pushResult, error) {
	var out []pushResult
	r := jsonscan.NewReader(body)
	err := r.Array(func() error {
		out = append(out, pushResult{})
		res := &out[len(out)-1]
		return object(r, func(key, val []byte) {
			switch string(key) {
			case "status":
				res.Status = pushStatus(val)
			case "error":
				res.Error = str(val)
			}
		})
	})
	return out, ended(r, body, err)
}

// pushStatus is an item's status, without a string for the usual ones.
func pushStatus(v []byte) string {
	switch string(v) {
	case `"queued"`:
		return "queued"
	case `"duplicate"`:
		return "duplicate"
	case `"buffered"`:
		return "buffered"
	}
	return str(v)
}

// popDeliveries reads the messages of a pop answer: each one's transaction
// id, payload size and what its ack needs. hint is the pop batch size, the
// most messages an answer holds. The messages of a partition share its id
// and lease, so each distinct one becomes a string once, and every handle
// lives in one array per answer: a transaction id is the only string a
// message costs.
func popDeliveries(body []byte, hint int) ([]benchkit.Delivery, error) {
	ds := make([]benchkit.Delivery, 0, hint)
	hs := make([]crownHandle, 0, hint)
	var part, lease interned
	r := jsonscan.NewReader(body)
	err := r.Object(func(key []byte) error {
		if string(key) != "messages" {
			return nil
		}
		return r.Array(func() error {
			var (
				d benchkit.Delivery
				h crownHandle
			)
			err := object(r, func(key, val []byte) {
				switch string(key) {
				case "transactionId":
					d.TxnID = str(val)
				case "partitionId":
					h.partitionID = part.str(val)
				case "leaseId":
					h.leaseID = lease.str(val)
				case "data":
					d.Bytes = len(val)
				}
			})
			if len(hs) == cap(hs) { // more than the hint: earlier handles keep the old array
				hs = make([]crownHandle, 0, max(hint, 16))
			}
			hs = append(hs, h)
			d.Handle = &hs[len(hs)-1]
			ds = append(ds, d)
			return err
		})
	})
	return ds, ended(r, body, err)
}

// interned is the string of the last raw JSON string it decoded.
type interned struct {
	raw []byte // aliases the answer being walked
	s   string
}

func (in *interned) str(raw []byte) string {
	if in.raw == nil || string(raw) != string(in.raw) {
		in.raw, in.s = raw, str(raw)
	}
	return in.s
}

// appendAckBatch appends the body of POST /api/v1/ack/batch completing ds.
func appendAckBatch(b []byte, group string, ds []benchkit.Delivery) []byte {
	b = append(b, '{')
	if group != "" {
		b = append(b, `"consumerGroup":`...)
		b = jsonscan.AppendString(b, group)
		b = append(b, ',')
	}
	b = append(b, `"acknowledgments":[`...)
	for i, d := range ds {
		h := d.Handle.(*crownHandle)
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"transactionId":`...)
		b = jsonscan.AppendString(b, d.TxnID)
		b = append(b, `,"partitionId":`...)
		b = jsonscan.AppendString(b, h.partitionID)
		if h.leaseID != "" {
			b = append(b, `,"leaseId":`...)
			b = jsonscan.AppendString(b, h.leaseID)
		}
		b = append(b, `,"status":"completed"}`...)
	}
	return append(b, "]}"...)
}

// ackResults reads an ack batch answer: whether each acknowledgment
// succeeded (success true and no error).
func ackResults(body []byte) ([]bool, error) {
	var ok []bool
	r := jsonscan.NewReader(body)
	err := r.Array(func() error {
		success, failed := false, false
		err := object(r, func(key, val []byte) {
			switch string(key) {
			case "success":
				success = string(val) == "true"
			case "error":
				failed = str(val) != ""
			}
		})
		ok = append(ok, success && !failed)
		return err
	})
	return ok, ended(r, body, err)
}

// object reads the next value of r as an object and hands fn each member's
// name and raw value (a member fn ignores costs what skipping it would: it
// is validated either way).
func object(r *jsonscan.Reader, fn func(key, val []byte)) error {
	return r.Object(func(key []byte) error {
		val, err := r.Raw()
		if err == nil {
			fn(key, val)
		}
		return err
	})
}

// ended is a walk's error, or End's, with the start of the answer for
// context.
func ended(r *jsonscan.Reader, body []byte, err error) error {
	if err == nil {
		err = r.End()
	}
	if err != nil {
		return fmt.Errorf("%.40s: %w", body, err)
	}
	return nil
}

// str is a string member's value; "" for null or another kind.
func str(v []byte) string {
	s, _ := jsonscan.Unquote(v)
	return s
}
