package segments

import "fmt"

// The push-maintenance buffer (queen-api.md 3.17): push requests accepted
// while the switch is on, kept whole and in log order until it is switched
// off. The switches themselves are rows of the settings bucket, whose values
// the state machine defines.

// BufferedItem is one message of a buffered push, as the push carried it.
type BufferedItem struct {
	Queue       string   `msgpack:"q"`
	Partition   string   `msgpack:"p"`
	TxID        string   `msgpack:"tx"`
	TraceID     [16]byte `msgpack:"trace"`
	HasTrace    bool     `msgpack:"has_trace"`
	ProducerSub string   `msgpack:"sub"`
	Payload     []byte   `msgpack:"payload"`
	Encrypted   bool     `msgpack:"enc"`
}

// BufferedPush is one push request held by the buffer.
type BufferedPush struct {
	Seq        uint64         `msgpack:"seq"`
	Principal  string         `msgpack:"principal"`
	AcceptedAt int64          `msgpack:"accepted"`
	Items      []BufferedItem `msgpack:"items"`
}

// PushBufferTotals describes what the buffer holds.
type PushBufferTotals struct {
	Requests uint64
	Messages uint64
	Bytes    uint64 // payload bytes
}

// Keys of the meta bucket for the buffer.
var (
	metaPushBufSeq   = []byte("pushbuf_seq")   // last buffered request number
	metaPushBufReqs  = []byte("pushbuf_reqs")  // requests buffered now
	metaPushBufMsgs  = []byte("pushbuf_msgs")  // messages buffered now
	metaPushBufBytes = []byte("pushbuf_bytes") // their payload bytes
)

func (b *BufferedPush) payloadBytes() uint64 {
	var n uint64
	for i := range b.Items {
		n += uint64(len(b.Items[i].Payload))
	}
	return n
}

// PushBufferTotals reads the buffer's totals.
func (t *Tx) PushBufferTotals() PushBufferTotals {
	return PushBufferTotals{Requests: t.metaU64(metaPushBufReqs), Messages: t.metaU64(metaPushBufMsgs),
		Bytes: t.metaU64(metaPushBufBytes)}
}

func (t *Tx) putPushBufferTotals(s PushBufferTotals) error {
	if err := t.putMetaU64(metaPushBufReqs, s.Requests); err != nil {
		return err
	}
	if err := t.putMetaU64(metaPushBufMsgs, s.Messages); err != nil {
		return err
	}
	return t.putMetaU64(metaPushBufBytes, s.Bytes)
}

// BufferPush numbers b and appends it to the buffer.
func (t *Tx) BufferPush(b *BufferedPush) error {
	seq, err := t.nextMeta(metaPushBufSeq)
	if err != nil {
		return err
	}
	b.Seq = seq
	if err := t.put(bPushBuffer, be64(seq), marshalMsgpack(b)); err != nil {
		return err
	}
	s := t.PushBufferTotals()
	s.Requests++
	s.Messages += uint64(len(b.Items))
	s.Bytes += b.payloadBytes()
	return t.putPushBufferTotals(s)
}

// BufferedPushes returns up to max buffered requests, oldest first (every
// one with max 0).
func (t *Tx) BufferedPushes(max int) ([]*BufferedPush, error) {
	var out []*BufferedPush
	err := forEachRecord(t, bPushBuffer, nil, nil, func(k []byte, b *BufferedPush) (bool, error) {
		if len(k) != 8 || u64(k) != b.Seq {
			return false, fmt.Errorf("buffered push %x holds number %d: %w", k, b.Seq, ErrCorrupt)
		}
		out = append(out, b)
		return max <= 0 || len(out) < max, nil
	})
	return out, err
}

// DeleteBufferedPush removes a buffered request the caller read.
func (t *Tx) DeleteBufferedPush(b *BufferedPush) error {
	if t.get(bPushBuffer, be64(b.Seq)) == nil {
		return nil
	}
	if err := t.del(bPushBuffer, be64(b.Seq)); err != nil {
		return err
	}
	s := t.PushBufferTotals()
	n, size := uint64(len(b.Items)), b.payloadBytes()
	if s.Requests == 0 || s.Messages < n || s.Bytes < size {
		return fmt.Errorf("push buffer totals %+v below a buffered request: %w", s, ErrCorrupt)
	}
	s.Requests--
	s.Messages -= n
	s.Bytes -= size
	return t.putPushBufferTotals(s)
}

// bucketsAddedLater are buckets of the state that a snapshot written by an
// earlier build of the same schema lacks (a leader not yet upgraded): it is
// still whole, and opening it creates them empty, as Open does for a state
// file. Every other bucket missing from a snapshot means it is damaged.
var bucketsAddedLater = [][]byte{bucketTraces, bucketTraceNames, bucketTraceOrder, bucketPushBuffer,
	bucketStreamQueries, bucketStreamNames, bucketStreamSources, bucketStreamState, bucketTxGone, bucketTxGoneAt,
	bucketDiscoveryRR}

func addedLater(name []byte) bool {
	for _, b := range bucketsAddedLater {
		if string(b) == string(name) {
			return true
		}
	}
	return false
}
