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
// server's own scanner instead and build the ack body by hand.

// pushResult is one item of a push answer.
type pushResult struct{ Status, Error string }

// pushResults reads the array of a push answer.
func pushResults(body []byte) ([]pushResult, error) {
	v, err := jsonscan.Value(body)
	if err != nil {
		return nil, err
	}
	var out []pushResult
	err = jsonscan.ArrayValid(v, func(elem []byte) error {
		var r pushResult
		out = append(out, r)
		return members(elem, func(key string, val []byte) error {
			switch key {
			case "status":
				out[len(out)-1].Status = str(val)
			case "error":
				out[len(out)-1].Error = str(val)
			}
			return nil
		})
	})
	return out, err
}

// popDeliveries reads the messages of a pop answer: each one's transaction
// id, payload size and what its ack needs.
func popDeliveries(body []byte) ([]benchkit.Delivery, error) {
	v, err := jsonscan.Value(body)
	if err != nil {
		return nil, err
	}
	var ds []benchkit.Delivery
	err = members(v, func(key string, val []byte) error {
		if key != "messages" {
			return nil
		}
		return jsonscan.ArrayValid(val, func(elem []byte) error {
			var (
				d benchkit.Delivery
				h crownHandle
			)
			err := members(elem, func(key string, val []byte) error {
				switch key {
				case "transactionId":
					d.TxnID = str(val)
				case "partitionId":
					h.partitionID = str(val)
				case "leaseId":
					h.leaseID = str(val)
				case "data":
					d.Bytes = len(val)
				}
				return nil
			})
			d.Handle = h
			ds = append(ds, d)
			return err
		})
	})
	return ds, err
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
		h := d.Handle.(crownHandle)
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
	v, err := jsonscan.Value(body)
	if err != nil {
		return nil, err
	}
	var ok []bool
	err = jsonscan.ArrayValid(v, func(elem []byte) error {
		success, failed := false, false
		err := members(elem, func(key string, val []byte) error {
			switch key {
			case "success":
				success = string(val) == "true"
			case "error":
				failed = str(val) != ""
			}
			return nil
		})
		ok = append(ok, success && !failed)
		return err
	})
	return ok, err
}

// members walks an object, naming what else it found.
func members(v []byte, fn func(key string, val []byte) error) error {
	if err := jsonscan.ObjectValid(v, fn); err != nil {
		return fmt.Errorf("%.40s: %w", v, err)
	}
	return nil
}

// str is a string member's value; "" for null or another kind.
func str(v []byte) string {
	s, _ := jsonscan.Unquote(v)
	return s
}
