package benchkit

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsAreContiguous(t *testing.T) {
	// Every bucket's range starts right after the previous one's, and
	// bucketOf maps both ends of a range to that bucket.
	var next uint64
	for i := 0; i < numBuckets; i++ {
		lo, hi := bucketRange(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, next)
		}
		if hi < lo {
			t.Fatalf("bucket %d: hi %d < lo %d", i, hi, lo)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d [%d,%d]: bucketOf gives %d and %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		if lo >= 2*subCount && float64(hi-lo+1)/float64(lo) > 1.0/subCount+1e-12 {
			t.Fatalf("bucket %d [%d,%d] wider than 1/%d", i, lo, hi, subCount)
		}
		next = hi + 1
		if next == 0 || next > 1<<63-1 {
			if i != numBuckets-1 {
				t.Fatalf("range exhausted at bucket %d of %d", i, numBuckets)
			}
		}
	}
	if bucketOf(1<<63-1) != numBuckets-1 {
		t.Fatalf("max int64 in bucket %d, want %d", bucketOf(1<<63-1), numBuckets-1)
	}
}

func TestHistogramEmpty(t *testing.T) {
	var h Histogram
	if h.Count() != 0 || h.Quantile(0.5) != 0 || h.Max() != 0 || h.Mean() != 0 {
		t.Fatalf("empty histogram: %+v", h.Summary())
	}
	if s := h.Summary(); s != (Summary{}) {
		t.Fatalf("empty summary %+v", s)
	}
}

func TestHistogramSmallValuesExact(t *testing.T) {
	var h Histogram
	for v := 1; v <= 10; v++ {
		h.Record(time.Duration(v))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.1, 1}, {0.5, 5}, {0.51, 6}, {0.9, 9}, {0.99, 10}, {1, 10}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %d, want %d", c.q, got, c.want)
		}
	}
	if h.Min() != 1 || h.Max() != 10 || h.Mean() != 5 { // 5.5 truncated
		t.Errorf("min %d max %d mean %d", h.Min(), h.Max(), h.Mean())
	}
}

func TestHistogramQuantilesWithinPrecision(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var vals []int64
	for i := 0; i < 100_000; i++ {
		// Log-uniform from 1 µs to 10 s, like request latencies.
		v := int64(1e3 * math.Pow(10, r.Float64()*7))
		vals = append(vals, v)
		h.Record(time.Duration(v))
	}
	slices.Sort(vals)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
		idx := int(float64(len(vals))*q+0.999999) - 1
		exact := vals[max(idx, 0)]
		got := int64(h.Quantile(q))
		if got < exact || float64(got-exact) > float64(exact)/subCount {
			t.Errorf("q%v: got %d, exact %d (more than 1/%d off, or below)", q, got, exact, subCount)
		}
	}
	if int64(h.Max()) != vals[len(vals)-1] || int64(h.Min()) != vals[0] {
		t.Errorf("min/max %d/%d, want %d/%d", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
	}
}

func TestHistogramMerge(t *testing.T) {
	var a, b, all Histogram
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Microsecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{}) // merging an empty one changes nothing
	if m != all {
		t.Fatalf("merged %+v, want %+v", m.Summary(), all.Summary())
	}
	if s := m.Summary(); s.Count != 1000 || s.MaxMs != 1 || s.P50Ms < 0.5 || s.P50Ms > 0.5*(1+1.0/subCount) {
		t.Fatalf("summary %+v", s)
	}
}

func TestHistogramNegative(t *testing.T) {
	var h Histogram
	h.Record(-time.Second)
	if h.Count() != 1 || h.Max() != 0 || h.Min() != 0 {
		t.Fatalf("negative: count %d min %d max %d", h.Count(), h.Min(), h.Max())
	}
}
