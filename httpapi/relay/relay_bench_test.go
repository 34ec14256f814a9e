package relay

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// popAnswer is about what a pop of 100 messages of 256 bytes answers.
var popAnswer = bytes.Repeat([]byte("m"), 58<<10)

// answerHandler answers every request with popAnswer, as a leader answers
// a relayed pop.
var answerHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Crown-Index", "1")
	w.Write(popAnswer)
})

// BenchmarkForward compares a follower's forward of a pop over a relay
// connection with one over keep-alive HTTP, with 8 callers at once as in
// the workload. Both run on loopback in this process, so the
// figure counts both sides' CPU.
func BenchmarkForward(b *testing.B) {
	b.Run("relay", func(b *testing.B) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			Upgrade(w, r, ServerConfig{Handler: answerHandler, MaxRequestBytes: 1 << 20,
				Headers: []string{"Content-Type", "X-Crown-Index"}})
		}))
		defer srv.Close()
		c := NewClient(ClientConfig{})
		defer c.Close()
		forward(b, func(i int) int {
			resp, err := c.Do(context.Background(), srv.URL, &Request{Method: "GET", Target: "/api/v1/pop/queue/q?batch=100&i=" + strconv.Itoa(i)})
			if err != nil {
				b.Fatal(err)
			}
			n := len(resp.Body)
			resp.Release()
			return n
		})
	})
	b.Run("http", func(b *testing.B) {
		srv := httptest.NewServer(answerHandler)
		defer srv.Close()
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
		forward(b, func(i int) int {
			resp, err := client.Get(srv.URL + "/api/v1/pop/queue/q?batch=100&i=" + strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				b.Fatal(err)
			}
			return len(body)
		})
	})
}

func forward(b *testing.B, do func(i int) int) {
	const callers = 8
	b.ReportAllocs()
	b.SetBytes(int64(len(popAnswer)))
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/callers + 1
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if n := do(c*per + i); n != len(popAnswer) {
					b.Errorf("answer of %d bytes", n)
					return
				}
			}
		}()
	}
	wg.Wait()
}
