package benchkit

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Modes of a run.
const (
	ModeBoth    = "both"    // producers and consumers at once
	ModeProduce = "produce" // producers only: leaves the messages for a later consume run
	ModeConsume = "consume" // consumers only: drains what an earlier produce run left
)

// DefaultCount is the message count when neither --count nor --duration is given.
const DefaultCount = 100_000

// Config is a workload, the same for every broker.
type Config struct {
	Mode        string        `json:"mode"`
	Count       int64         `json:"count"` // total messages; 0 with Duration: no limit
	Duration    time.Duration `json:"-"`
	PayloadSize int           `json:"payload_size"`
	PushBatch   int           `json:"push_batch"`
	PopBatch    int           `json:"pop_batch"`
	Partitions  int           `json:"partitions"`
	Queues      int           `json:"queues"`
	Groups      int           `json:"groups"`
	Producers   int           `json:"producers"`
	Consumers   int           `json:"consumers"`      // per group
	Rate        float64       `json:"rate,omitempty"` // messages/s over all producers; 0: as fast as answered
	Prefix      string        `json:"prefix"`
	RunID       string        `json:"run_id"`
	IdleTimeout time.Duration `json:"-"`
	Progress    string        `json:"-"`
	Retries     int           `json:"-"`

	DurationSec float64 `json:"duration_s,omitempty"` // for the report
}

// RegisterFlags registers the workload flags shared by every driver.
func RegisterFlags(fs *flag.FlagSet, c *Config) {
	fs.StringVar(&c.Mode, "mode", ModeBoth, "both (produce and consume at once), produce, or consume (drain an earlier produce run: give its --run-id, --producers and --count)")
	fs.Int64Var(&c.Count, "count", 0, fmt.Sprintf("messages to produce in total, split over the producers (0: %d, or no limit with --duration); in consume mode the produce run's count (0: inferred from the highest sequence number seen per producer)", DefaultCount))
	fs.DurationVar(&c.Duration, "duration", 0, "produce for this long (with --count: whichever ends first); ignored in consume mode")
	fs.IntVar(&c.PayloadSize, "payload-size", 256, "bytes of each message's JSON payload {\"p\":producer,\"s\":seq,\"pad\":\"xx...\"} (at least about 30)")
	fs.IntVar(&c.PushBatch, "push-batch", 100, "messages per push request")
	fs.IntVar(&c.PopBatch, "pop-batch", 100, "messages per pop request (at most)")
	fs.IntVar(&c.Partitions, "partitions", 8, "partitions per queue: p0..pN-1; messages are spread over them round-robin")
	fs.IntVar(&c.Queues, "queues", 1, "queues: PREFIX-q0..; messages are spread over them too")
	fs.IntVar(&c.Groups, "groups", 1, "consumer groups PREFIX-g0..; each receives every message")
	fs.IntVar(&c.Producers, "producers", 8, "concurrent producers")
	fs.Float64Var(&c.Rate, "rate", 0, "messages per second over all producers, each pacing its pushes to an even share (0: as fast as they are answered); for latency at a given load")
	fs.IntVar(&c.Consumers, "consumers", 8, "concurrent consumers per consumer group")
	fs.StringVar(&c.Prefix, "prefix", "bench", "name prefix of the queues and consumer groups (letters, digits, '-' and '_')")
	fs.StringVar(&c.RunID, "run-id", "", "id in every transaction id, letters and digits (default: random; a consume run needs the produce run's)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", 10*time.Second, "consumers give up after this long without a message once producing is over (or, in consume mode, at any time)")
	fs.StringVar(&c.Progress, "progress", "auto", "progress line on stderr about once a second: auto (rewritten in place on a terminal, a line per report otherwise), on, or off")
	fs.IntVar(&c.Retries, "retries", 30, "attempts of a push or an acknowledgment that fails with a 5xx or a transport error (same transaction ids: idempotent) before it is given up")
}

// Validate checks the flags and fills the defaults (count, run id).
func (c *Config) Validate() error {
	switch c.Mode {
	case ModeBoth, ModeProduce, ModeConsume:
	default:
		return fmt.Errorf("--mode %q: want both, produce or consume", c.Mode)
	}
	if c.Count < 0 || c.Duration < 0 || c.Rate < 0 {
		return errors.New("--count, --duration and --rate must not be negative")
	}
	// NaN slips past every comparison (the producers would go unpaced) and
	// neither NaN nor Inf can be written into the JSON report.
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		return fmt.Errorf("--rate %v: want a finite number of messages per second", c.Rate)
	}
	if c.Count == 0 && c.Duration == 0 && c.Mode != ModeConsume {
		c.Count = DefaultCount
	}
	if c.Mode == ModeConsume {
		c.Duration = 0 // the consumers stop when done or idle
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"payload-size", c.PayloadSize}, {"push-batch", c.PushBatch}, {"pop-batch", c.PopBatch},
		{"partitions", c.Partitions}, {"queues", c.Queues}, {"groups", c.Groups},
		{"producers", c.Producers}, {"consumers", c.Consumers}, {"retries", c.Retries}} {
		if f.v < 1 {
			return fmt.Errorf("--%s must be at least 1", f.name)
		}
	}
	if c.PayloadSize < minPayload(c.Producers) {
		return fmt.Errorf("--payload-size must be at least %d", minPayload(c.Producers))
	}
	if c.IdleTimeout <= 0 {
		return errors.New("--idle-timeout must be positive")
	}
	if !validName(c.Prefix) {
		return fmt.Errorf("--prefix %q: use letters, digits, '-' and '_'", c.Prefix)
	}
	switch c.Progress {
	case "auto", "on", "off":
	default:
		return fmt.Errorf("--progress %q: want auto, on or off", c.Progress)
	}
	if c.RunID == "" {
		if c.Mode == ModeConsume {
			return errors.New("--mode consume needs --run-id: the id printed by the produce run")
		}
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.RunID = hex.EncodeToString(b[:])
	}
	for _, r := range c.RunID {
		if !isAlnum(r) {
			return fmt.Errorf("--run-id %q: use letters and digits only", c.RunID)
		}
	}
	c.DurationSec = c.Duration.Seconds()
	return nil
}

func isAlnum(r rune) bool {
	return r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
}

func validName(s string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for _, r := range s {
		if !isAlnum(r) && r != '-' && r != '_' {
			return false
		}
	}
	return true
}

// minPayload is the smallest payload that holds the largest producer number
// and a 10-digit sequence number.
func minPayload(producers int) int {
	return len(appendPayloadHead(nil, producers, 9_999_999_999)) + 2
}

// ProducerCount is how many messages producer p sends when the total is
// count: an even split, the first count%producers producers one more.
func (c *Config) ProducerCount(p int) int64 {
	if c.Count == 0 {
		return -1 // unlimited: the duration ends it
	}
	n := c.Count / int64(c.Producers)
	if int64(p) < c.Count%int64(c.Producers) {
		n++
	}
	return n
}

// QueueName is queue i's name.
func (c *Config) QueueName(i int) string { return c.Prefix + "-q" + strconv.Itoa(i) }

// GroupName is consumer group g's name.
func (c *Config) GroupName(g int) string { return c.Prefix + "-g" + strconv.Itoa(g) }

// PartitionName is partition i's name.
func PartitionName(i int) string { return "p" + strconv.Itoa(i) }

// Place spreads the messages of every producer round-robin over all
// partitions of all queues, each producer starting at a different slot.
func (c *Config) Place(producer int, seq int64) (queue, partition int) {
	slots := int64(c.Queues * c.Partitions)
	slot := int((seq + int64(producer)) % slots)
	return slot / c.Partitions, slot % c.Partitions
}

// TxnID is a message's transaction id: RUN-PRODUCER-SEQ.
func (c *Config) TxnID(producer int, seq int64) string {
	return string(AppendTxnID(nil, c.RunID, producer, seq))
}

// AppendTxnID appends RUN-PRODUCER-SEQ to b.
func AppendTxnID(b []byte, run string, producer int, seq int64) []byte {
	b = append(b, run...)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(producer), 10)
	b = append(b, '-')
	return strconv.AppendInt(b, seq, 10)
}

// ParseTxnID splits RUN-PRODUCER-SEQ; ok is false for anything else.
func ParseTxnID(id string) (run string, producer int, seq int64, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return "", 0, 0, false
	}
	j := strings.LastIndexByte(id[:i], '-')
	if j <= 0 {
		return "", 0, 0, false
	}
	s, err1 := strconv.ParseInt(id[i+1:], 10, 64)
	p, err2 := strconv.Atoi(id[j+1 : i])
	if err1 != nil || err2 != nil || s < 0 || p < 0 {
		return "", 0, 0, false
	}
	return id[:j], p, s, true
}

func appendPayloadHead(b []byte, producer int, seq int64) []byte {
	b = append(b, `{"p":`...)
	b = strconv.AppendInt(b, int64(producer), 10)
	b = append(b, `,"s":`...)
	b = strconv.AppendInt(b, seq, 10)
	return append(b, `,"pad":"`...)
}

// AppendPayload appends the JSON payload {"p":producer,"s":seq,"pad":"xx..."}
// padded to size bytes (or as short as it can be when size is smaller).
func AppendPayload(b []byte, producer int, seq int64, size int) []byte {
	start := len(b)
	b = appendPayloadHead(b, producer, seq)
	pad := size - (len(b) - start) - 2
	for ; pad > 0; pad-- {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}
