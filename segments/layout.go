// Package segments owns Crown's on-disk layout in bbolt: queues, partitions,
// message segments, consumer-group cursors and leases, the transaction-id
// index, dead letters and subscriptions. It knows nothing of Raft, HTTP or the
// clock: callers pass every timestamp in. See DESIGN.md for the layout and
// the invariants it keeps.
package segments

import (
	"encoding/binary"
)

// Top-level buckets. Every bucket is flat and keyed by fixed-width big-endian
// integers followed by names, so that related rows are contiguous and a range
// scan is a short forward cursor walk.
var (
	bucketMeta       = []byte("meta")       // fixed keys below
	bucketQueues     = []byte("queues")     // 'n' queue name -> Queue
	bucketQueueIDs   = []byte("queue_ids")  // qid(8) -> 'n' queue name
	bucketParts      = []byte("partitions") // qid(8) name -> Partition
	bucketPartIDs    = []byte("part_ids")   // pid(8) -> qid(8) name
	bucketPartUUIDs  = []byte("part_uuids") // uuid(16) -> pid(8)
	bucketSegments   = []byte("segments")   // pid(8) firstOffset(8) -> a block of references from that segment on, or one blobRef (refblock.go)
	bucketGroups     = []byte("groups")     // pid(8) group -> Group
	bucketQueueGroup = []byte("qgroups")    // qid(8) group -> QueueGroup
	bucketTxIDs      = []byte("txindex")    // qid(8) txid pid(8) len(2) -> offset(8) of the newest occurrence (txids.go)
	bucketTxIDsV2    = []byte("txids")      // schema 2's index, rebuilt as txindex when opened
	bucketLeases     = []byte("leases")     // leaseID(16) pid(8) group -> empty
	bucketDLQ        = []byte("dlq")        // qid(8) seq(8) -> DeadLetter
	bucketSubs       = []byte("subs")       // group 0 scope... -> Subscription
	bucketNodes      = []byte("nodes")      // 'n' node id -> Node
	bucketSettings   = []byte("settings")   // name -> value (cluster-wide switches)
	bucketPolicies   = []byte("policies")   // 'n' policy name -> Policy (OJS queue policies)
	bucketQEvents    = []byte("qevents")    // seq(8) -> QueueEvent (bounded, oldest pruned)

	// Traces and the push-maintenance buffer (traces.go, system.go).
	bucketTraces     = []byte("traces")      // pid(8) offset(8) seq(8) -> TraceEvent (traces.go)
	bucketTraceNames = []byte("trace_names") // len-prefixed name seq(8) -> pid(8) offset(8) createdAt(8)
	bucketTraceOrder = []byte("trace_order") // seq(8) -> pid(8) offset(8): every trace event, oldest first
	bucketPushBuffer = []byte("push_buffer") // seq(8) -> BufferedPush (system.go)

	// Streams queries and their operator state (streams.go).
	bucketStreamQueries = []byte("stream_queries") // id(16) -> StreamQuery
	bucketStreamNames   = []byte("stream_names")   // name -> id(16)
	bucketStreamSources = []byte("stream_sources") // len-prefixed source queue, id(16) -> empty
	bucketStreamState   = []byte("stream_state")   // id(16) partition uuid(16) key -> state row

	// Each group's round-robin pointer across the queues of a discovery
	// pop's scope (discovery.go).
	bucketDiscoveryRR = []byte("discovery_rr") // len-prefixed group, namespace, task -> queue name the next pop starts at

	// bucketFiles accounts for the blob files (blobs.go). It is physical
	// layout, not state: it is left out of allBuckets and so of the digest.
	bucketFiles = []byte("files") // 'g', 'a', 'f' file(8) -> fileRec
)

// storeBuckets is every bucket a store has: the state's, then the physical
// accounting of its blob files and the indexes derived from the state
// (tagindex.go), none of which the digest hashes.
var storeBuckets = append(allBuckets[:len(allBuckets):len(allBuckets)], bucketFiles,
	bucketQueueNS, bucketQueueTask, bucketQueueTags)

// allBuckets lists every bucket of the state in a fixed order. The order
// matters for the state digest, which must be identical on every node.
var allBuckets = [][]byte{
	bucketMeta, bucketQueues, bucketQueueIDs, bucketParts, bucketPartIDs,
	bucketPartUUIDs, bucketSegments, bucketGroups, bucketQueueGroup,
	bucketTxIDs, bucketLeases, bucketDLQ, bucketSubs, bucketNodes, bucketSettings,
	bucketPolicies, bucketQEvents,
	bucketTraces, bucketTraceNames, bucketTraceOrder, bucketPushBuffer,
	bucketStreamQueries, bucketStreamNames, bucketStreamSources, bucketStreamState,
	bucketTxGone, bucketTxGoneAt,
	// Added last: the buckets before it keep their place in the digest.
	bucketDiscoveryRR,
}

// Keys of the meta bucket.
var (
	metaApplied   = []byte("applied")    // last applied Raft index
	metaNow       = []byte("now")        // time high-water mark, unix µs
	metaIDSeq     = []byte("id_seq")     // source of message, lease and entity ids
	metaQueueSeq  = []byte("queue_seq")  // last queue number
	metaPartSeq   = []byte("part_seq")   // last partition number
	metaDLQSeq    = []byte("dlq_seq")    // last dead-letter number
	metaSchema    = []byte("schema")     // layout version
	metaCounters  = []byte("counters")   // lifetime counters, u64 each
	metaEventSeq  = []byte("qevent_seq") // last queue-event number
	schemaVersion = uint64(9)            // 2: segment blobs in files beside the database; 3: txid index keyed by queue, values the offset alone; 4: partition records hold their newest segment references; 5: packed; 6: IDsIndexedFrom; 7: blocks of references in the segments bucket; 8: compact partition records; 9: the queue tag index
)

// nameKey keys a row by a name that may be empty (bbolt refuses empty keys;
// the empty string is a valid queue name).
func nameKey(name string) []byte {
	k := make([]byte, 1+len(name))
	k[0] = 'n'
	copy(k[1:], name)
	return k
}

func u64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

func putU64(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }

func be64(v uint64) []byte {
	b := make([]byte, 8)
	putU64(b, v)
	return b
}

// key8 builds id(8) followed by suffix.
func key8(id uint64, suffix []byte) []byte {
	k := make([]byte, 8+len(suffix))
	putU64(k, id)
	copy(k[8:], suffix)
	return k
}

// key88 builds a(8) b(8).
func key88(a, b uint64) []byte {
	k := make([]byte, 16)
	putU64(k, a)
	putU64(k[8:], b)
	return k
}
