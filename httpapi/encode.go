package httpapi

import (
	"encoding/hex"

	"github.com/crownmq/crown/fsm"
	js "github.com/crownmq/crown/httpapi/jsonscan"
)

// Hand-written encoders for the responses on the hot path (push, pop, ack):
// they append to one pooled buffer, with no reflection and no intermediate
// maps. Field names and shapes follow queen-api.md 3.5 to 3.8 exactly.

func appendUUID(dst []byte, id [16]byte) []byte {
	var b [38]byte
	b[0] = '"'
	hex.Encode(b[1:9], id[0:4])
	b[9] = '-'
	hex.Encode(b[10:14], id[4:6])
	b[14] = '-'
	hex.Encode(b[15:19], id[6:8])
	b[19] = '-'
	hex.Encode(b[20:24], id[8:10])
	b[24] = '-'
	hex.Encode(b[25:37], id[10:])
	b[37] = '"'
	return append(dst, b[:]...)
}

func appendOptString(dst []byte, s string, present bool) []byte {
	if !present {
		return append(dst, "null"...)
	}
	return js.AppendString(dst, s)
}

// appendPushResults writes the push response array.
func appendPushResults(dst []byte, items []fsm.PushItem, res []fsm.PushItemResult) []byte {
	dst = append(dst, '[')
	for i := range items {
		it, r := &items[i], &res[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"index":`...)
		dst = js.AppendInt(dst, int64(i))
		if r.Status == fsm.PushDuplicate {
			dst = append(dst, `,"status":"duplicate"`...)
		} else {
			dst = append(dst, `,"status":"queued"`...)
		}
		dst = append(dst, `,"transaction_id":`...)
		dst = js.AppendString(dst, it.TxID)
		dst = append(dst, `,"transactionId":`...)
		dst = js.AppendString(dst, it.TxID)
		dst = append(dst, `,"message_id":`...)
		dst = appendUUID(dst, r.MessageID)
		if r.Status != fsm.PushDuplicate {
			dst = append(dst, `,"partition_id":`...)
			dst = appendUUID(dst, r.PartitionID)
			dst = append(dst, `,"trace_id":`...)
			if it.HasTrace {
				dst = appendUUID(dst, it.TraceID)
			} else {
				dst = append(dst, "null"...)
			}
		}
		dst = append(dst, `,"queueName":`...)
		dst = js.AppendString(dst, it.Queue)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendAckResults writes the ack response array.
func appendAckResults(dst []byte, items []fsm.AckItem, res []fsm.AckItemResult) []byte {
	dst = append(dst, '[')
	for i := range res {
		r := &res[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"index":`...)
		dst = js.AppendInt(dst, int64(i))
		dst = append(dst, `,"transactionId":`...)
		dst = js.AppendString(dst, items[i].TxID)
		dst = append(dst, `,"success":`...)
		dst = js.AppendBool(dst, r.Success)
		dst = append(dst, `,"error":`...)
		dst = appendOptString(dst, r.Error, r.Error != "")
		dst = append(dst, `,"queueName":`...)
		dst = appendOptString(dst, r.Queue, r.Resolved)
		dst = append(dst, `,"partitionName":`...)
		dst = appendOptString(dst, r.Partition, r.Resolved)
		dst = append(dst, `,"leaseReleased":`...)
		dst = js.AppendBool(dst, r.LeaseReleased)
		dst = append(dst, `,"dlq":`...)
		dst = js.AppendBool(dst, r.DLQ)
		dst = append(dst, `,"dropped":`...)
		dst = js.AppendBool(dst, r.Dropped)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendLeaseMembers appends the members a pop answer and each of its
// messages carry about the claim: queue, partition, partitionId, leaseId
// and consumerGroup.
func appendLeaseMembers(dst []byte, lp *fsm.LeasedPartition, lease, group string) []byte {
	dst = append(dst, `"queue":`...)
	dst = js.AppendString(dst, lp.Queue)
	dst = append(dst, `,"partition":`...)
	dst = js.AppendString(dst, lp.Partition)
	dst = append(dst, `,"partitionId":`...)
	dst = appendUUID(dst, lp.PartitionID)
	dst = append(dst, `,"leaseId":`...)
	dst = js.AppendString(dst, lease)
	dst = append(dst, `,"consumerGroup":`...)
	return js.AppendString(dst, group)
}

// appendPop writes a pop response (queen-api.md 3.6, 4.18), opening
// encrypted payloads.
func (s *Server) appendPop(dst []byte, lr *fsm.LeaseResult) ([]byte, *apiError) {
	lease := ""
	if lr.LeaseID != ([16]byte{}) {
		lease = formatUUID(lr.LeaseID)
	}
	dst = append(dst, `{"success":true,`...)
	dst = appendLeaseMembers(dst, &lr.Partitions[0], lease, lr.Group)
	dst = append(dst, `,"partitionsClaimed":`...)
	dst = js.AppendInt(dst, int64(len(lr.Partitions)))
	dst = append(dst, `,"messages":[`...)
	// Every message of a partition repeats the same five members, and the
	// messages of one segment share their commit time: both are encoded
	// once (time.Format was 3 % of a leader's CPU in a consume run).
	var shared, at []byte
	lastAt := int64(-1)
	n := 0
	for pi := range lr.Partitions {
		lp := &lr.Partitions[pi]
		shared = appendLeaseMembers(append(shared[:0], ','), lp, lease, lr.Group)
		shared = append(shared, `,"data":`...)
		for i := range lp.Messages {
			m := &lp.Messages[i]
			data, aerr := s.open(m.Payload, m.Encrypted)
			if aerr != nil {
				return dst, aerr
			}
			if n > 0 {
				dst = append(dst, ',')
			}
			n++
			dst = append(dst, `{"id":`...)
			dst = appendUUID(dst, m.ID)
			dst = append(dst, `,"transactionId":`...)
			dst = js.AppendString(dst, m.TxID)
			dst = append(dst, shared...)
			dst = append(dst, data...)
			dst = append(dst, `,"traceId":`...)
			if m.HasTrace {
				dst = appendUUID(dst, m.TraceID)
			} else {
				dst = append(dst, "null"...)
			}
			dst = append(dst, `,"producerSub":`...)
			dst = appendOptString(dst, m.ProducerSub, m.ProducerSub != "")
			dst = append(dst, `,"createdAt":"`...)
			if m.CreatedAt != lastAt {
				at, lastAt = appendMicros(at[:0], m.CreatedAt), m.CreatedAt
			}
			dst = append(dst, at...)
			dst = append(dst, `","retryCount":`...)
			dst = js.AppendUint(dst, m.RetryCount)
			dst = append(dst, '}')
		}
	}
	return append(dst, "]}"...), nil
}
