package relay

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestFramesRoundTrip(t *testing.T) {
	for _, f := range []*Frame{
		{Kind: KindRequest, ID: 1, Method: "POST", Target: "/api/v1/push", Fields: []Field{{"Content-Type", "application/json"}, {"X-Crown-Hops", "1"}}, Body: []byte(`{"items":[]}`)},
		{Kind: KindRequest, ID: 1 << 60, Method: "GET", Target: "/api/v1/pop/queue/q?batch=100&wait=false"},
		{Kind: KindResponse, ID: 7, Status: 204},
		{Kind: KindResponse, ID: 8, Status: 200, Fields: []Field{{"X-Crown-Index", "12"}}, Body: bytes.Repeat([]byte("x"), 70000)},
		{Kind: KindCancel, ID: 9},
		{Kind: KindGoAway, ID: 0},
	} {
		b, err := AppendFrame(nil, f)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		got, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(b)), 1<<20, nil)
		if err != nil {
			t.Fatalf("kind %d: %v", f.Kind, err)
		}
		if !sameFrame(got, f) {
			t.Errorf("decoded %+v, want %+v", got, f)
		}
	}
}

func TestFramesThatCannotBeEncoded(t *testing.T) {
	long := strings.Repeat("a", 1<<16)
	for name, f := range map[string]*Frame{
		"method":          {Kind: KindRequest, Method: long[:256]},
		"target":          {Kind: KindRequest, Method: "GET", Target: long},
		"name":            {Kind: KindResponse, Status: 200, Fields: []Field{{long[:256], ""}}},
		"value":           {Kind: KindResponse, Status: 200, Fields: []Field{{"A", long}}},
		"fields":          {Kind: KindResponse, Status: 200, Fields: make([]Field, 256)},
		"status":          {Kind: KindResponse, Status: 70000},
		"kind":            {Kind: 9},
		"nokind":          {},
		"negative status": {Kind: KindResponse, Status: -1},
	} {
		if _, err := AppendFrame(nil, f); !errors.Is(err, ErrEncode) {
			t.Errorf("%s: err %v, want ErrEncode", name, err)
		}
	}
}

func TestReadFrameRefuses(t *testing.T) {
	ok, _ := AppendFrame(nil, &Frame{Kind: KindRequest, ID: 1, Method: "GET", Target: "/", Body: make([]byte, 100)})
	for name, c := range map[string]struct {
		b    []byte
		max  int
		want error
	}{
		"too large": {ok, 50, ErrTooLarge},
		"cut short": {ok[:len(ok)-1], 1 << 20, io.ErrUnexpectedEOF},
		"empty":     {nil, 1 << 20, io.EOF},
		"bad kind":  {[]byte{0, 0, 0, 9, 7, 0, 0, 0, 0, 0, 0, 0, 1}, 1 << 20, ErrMalformed},
		"short id":  {[]byte{0, 0, 0, 3, 1, 0, 0}, 1 << 20, ErrMalformed},
		"method":    {[]byte{0, 0, 0, 11, 1, 0, 0, 0, 0, 0, 0, 0, 1, 5, 'G'}, 1 << 20, ErrMalformed},
		"trailing":  {[]byte{0, 0, 0, 10, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 1 << 20, ErrMalformed},
	} {
		if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(c.b)), c.max, nil); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", name, err, c.want)
		}
	}
}

// FuzzParseFrame: any bytes from a peer either fail to parse or parse to a
// frame that encodes back to the same bytes.
func FuzzParseFrame(f *testing.F) {
	for _, fr := range []*Frame{
		{Kind: KindRequest, ID: 3, Method: "POST", Target: "/api/v1/ack/batch", Fields: []Field{{"Content-Type", "application/json"}}, Body: []byte(`{"acknowledgments":[]}`)},
		{Kind: KindResponse, ID: 3, Status: 200, Fields: []Field{{"X-Crown-Index", "99"}}, Body: []byte(`[]`)},
		{Kind: KindCancel, ID: 4},
		{Kind: KindGoAway, ID: 2},
	} {
		b, _ := AppendFrame(nil, fr)
		f.Add(b[4:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseFrame(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		enc, err := AppendFrame(nil, fr)
		if err != nil {
			t.Fatalf("a parsed frame does not encode: %v", err)
		}
		if !bytes.Equal(enc[4:], b) {
			t.Fatalf("re-encoded %x, read %x", enc[4:], b)
		}
	})
}

func sameFrame(a, b *Frame) bool {
	norm := func(f *Frame) Frame {
		c := *f
		if len(c.Fields) == 0 {
			c.Fields = nil
		}
		if len(c.Body) == 0 {
			c.Body = nil
		}
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
