// Package benchkit holds what `crownctl bench` and the JetStream driver
// cmd/internal/natsbench share, so that both measure the same workload the
// same way and write the same JSON report: the workload's flags and naming,
// a latency histogram, the exactly-once accounting, the progress line and
// the report with its renderers.
package benchkit

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: every power-of-two range of values
// is split into 2^subBits linear buckets, so a recorded value is known to
// within 1/2^subBits (about 3%).
const subBits = 5

const (
	subCount   = 1 << subBits
	numBuckets = (64 - subBits) * subCount
)

// Histogram is a fixed-size log-linear histogram of durations (nanoseconds),
// HDR-style: constant relative precision over the whole int64 range, O(1)
// recording, no allocation. It is not safe for concurrent use: give each
// goroutine its own and Merge them.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    float64 // nanoseconds
	min    int64
	max    int64
}

// bucketOf maps a value to its bucket: values below 2*subCount have a bucket
// each; above, the top subBits+1 significant bits select the bucket.
func bucketOf(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1 // >= 1
	return (shift+1)<<subBits + int(v>>shift) - subCount
}

// bucketRange returns the smallest and largest value that fall into bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < 2*subCount {
		return uint64(i), uint64(i)
	}
	shift := i>>subBits - 1
	lo = uint64(i&(subCount-1)+subCount) << shift
	return lo, lo + (1 << shift) - 1
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(uint64(v))]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recorded value, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min is the smallest recorded value, exactly.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Mean is the exact mean.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value at quantile q (0..1): the largest value of the
// bucket holding the ceil(q*n)-th smallest recorded value, clamped to the
// exact minimum and maximum. It is never below the true quantile and at most
// about 3% above it.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bucketRange(i)
			return time.Duration(min(max(int64(hi), h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

// Summary is a histogram in a report, in milliseconds.
type Summary struct {
	Count  uint64  `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// Summary summarises the histogram for a report.
func (h *Histogram) Summary() Summary {
	return Summary{Count: h.n, MeanMs: ms(h.Mean()), P50Ms: ms(h.Quantile(0.50)), P90Ms: ms(h.Quantile(0.90)),
		P99Ms: ms(h.Quantile(0.99)), MaxMs: ms(h.Max())}
}
