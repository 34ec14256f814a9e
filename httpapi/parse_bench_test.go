package httpapi

import (
	"fmt"
	"testing"
)

// ackBatchBody is the acknowledgment of one 100-message pop, as a Queen
// client (and crownctl bench) sends it.
func ackBatchBody(n int) []byte {
	b := []byte(`{"consumerGroup":"bench-g0","acknowledgments":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"transactionId":"5f1c2a9e-3-%d","partitionId":"0193a6b2-7c1d-7e55-9a41-1f2e3d4c5b6a",`+
			`"leaseId":"0193a6b2-7c1e-7a00-8b12-aa55aa55aa55","status":"completed"}`, 100000+i)
	}
	return append(b, "]}"...)
}

func BenchmarkParseAckBatch100(b *testing.B) {
	body := ackBatchBody(100)
	lim := DefaultLimits
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseAckBatch(body, lim); err != nil {
			b.Fatal(err)
		}
	}
}

// pushBody is one producer request of crownctl bench: 100 messages of a
// 256-byte JSON payload.
func pushBody(n int) []byte {
	pad := make([]byte, 200)
	for i := range pad {
		pad[i] = 'x'
	}
	b := []byte(`{"items":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"queue":"bench-q0","partition":"p%d","transactionId":"5f1c2a9e-3-%d","payload":{"p":3,"s":%d,"pad":"%s"}}`,
			i%8, 100000+i, 100000+i, pad)
	}
	return append(b, "]}"...)
}

func BenchmarkParsePush100(b *testing.B) {
	body := pushBody(100)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parsePush(body, DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseUUID reads a dashed id, as every acknowledgment names its
// partition and lease.
func BenchmarkParseUUID(b *testing.B) {
	in := []byte("0193a6b2-7c1d-7e55-9a41-1f2e3d4c5b6a")
	for b.Loop() {
		if _, ok := parseUUID(in); !ok {
			b.Fatal("refused")
		}
	}
}
