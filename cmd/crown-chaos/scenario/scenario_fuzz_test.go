package scenario

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse: scenario files are written by hand, so the parser reads
// untrusted text. It must never panic, and whatever it accepts must print
// (Format) to a file that parses back to the same events.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../../scripts/chaos/scenarios/*.chaos")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("name: x\n1s partition leader client | rest\n+2s netem all delay=5ms jitter=1ms loss=0.5%\n4s end\n")
	f.Add("1s flap n1 period=300ms as F\n2s heal\n3s restart F\n")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := Parse(strings.NewReader(text))
		if err != nil {
			return
		}
		out := Format(s)
		again, err := Parse(strings.NewReader(out))
		if err != nil {
			t.Fatalf("formatted scenario does not parse: %v\n%s", err, out)
		}
		// Line numbers name the source line, which formatting may move.
		for i := range s.Events {
			s.Events[i].Line = 0
		}
		for i := range again.Events {
			again.Events[i].Line = 0
		}
		if !reflect.DeepEqual(s.Events, again.Events) || s.Name != again.Name || s.Description != again.Description {
			t.Fatalf("round trip changed the scenario:\n%+v\n%+v\n%s", s, again, out)
		}
	})
}
