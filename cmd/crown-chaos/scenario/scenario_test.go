package scenario

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseEvents(t *testing.T) {
	tests := []struct {
		line string
		want Event
	}{
		{"5s partition leader | rest", Event{At: 5 * time.Second, Action: Partition, Groups: [][]Sel{{"leader"}, {"rest"}}}},
		{"5s partition n1|n2 n3", Event{At: 5 * time.Second, Action: Partition, Groups: [][]Sel{{"n1"}, {"n2", "n3"}}}},
		{"5s partition leader client | rest", Event{At: 5 * time.Second, Action: Partition, Groups: [][]Sel{{"leader", "client"}, {"rest"}}}},
		{"5s partition node1 | node2 | node3", Event{At: 5 * time.Second, Action: Partition, Groups: [][]Sel{{"n1"}, {"n2"}, {"n3"}}}},
		{"1.5s isolate follower", Event{At: 1500 * time.Millisecond, Action: Isolate, Groups: [][]Sel{{"follower"}}}},
		{"2s bridge leader follower", Event{At: 2 * time.Second, Action: Cut, Groups: [][]Sel{{"leader"}, {"follower"}}}},
		{"2s cut n1 n3", Event{At: 2 * time.Second, Action: Cut, Groups: [][]Sel{{"n1"}, {"n3"}}}},
		{"15s heal", Event{At: 15 * time.Second, Action: Heal}},
		{"20s kill leader", Event{At: 20 * time.Second, Action: Kill, Groups: [][]Sel{{"leader"}}}},
		{"20s kill leader as OLD_LEADER", Event{At: 20 * time.Second, Action: Kill, Groups: [][]Sel{{"leader"}}, Bind: "OLD_LEADER"}},
		{"6s wipe follower as W", Event{At: 6 * time.Second, Action: Wipe, Groups: [][]Sel{{"follower"}}, Bind: "W"}},
		{"25s restart all", Event{At: 25 * time.Second, Action: Restart, Groups: [][]Sel{{"all"}}}},
		{"25s restart killed", Event{At: 25 * time.Second, Action: Restart, Groups: [][]Sel{{"killed"}}}},
		{"25s stop followers", Event{At: 25 * time.Second, Action: Stop, Groups: [][]Sel{{"followers"}}}},
		{"1m pause random", Event{At: time.Minute, Action: Pause, Groups: [][]Sel{{"random"}}}},
		{"1m resume paused", Event{At: time.Minute, Action: Resume, Groups: [][]Sel{{"paused"}}}},
		{"30s netem all delay=100ms loss=10%", Event{At: 30 * time.Second, Action: Netem, Groups: [][]Sel{{"all"}},
			Netem: NetemParams{Delay: 100 * time.Millisecond, Loss: 0.1}}},
		{"30s netem n2 delay=50ms jitter=10ms", Event{At: 30 * time.Second, Action: Netem, Groups: [][]Sel{{"n2"}},
			Netem: NetemParams{Delay: 50 * time.Millisecond, Jitter: 10 * time.Millisecond}}},
		{"30s netem leader loss=2.5%", Event{At: 30 * time.Second, Action: Netem, Groups: [][]Sel{{"leader"}}, Netem: NetemParams{Loss: 0.025}}},
		{"3s flap follower2 period=500ms", Event{At: 3 * time.Second, Action: Flap, Groups: [][]Sel{{"follower2"}}, Period: 500 * time.Millisecond}},
		{"3s flap n1", Event{At: 3 * time.Second, Action: Flap, Groups: [][]Sel{{"n1"}}}},
		{"40s checkpoint", Event{At: 40 * time.Second, Action: Checkpoint}},
		{"45s end", Event{At: 45 * time.Second, Action: End}},
		{"5s KILL LEADER", Event{At: 5 * time.Second, Action: Kill, Groups: [][]Sel{{"leader"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			s, err := ParseString(tc.line)
			if tc.line == "5s KILL LEADER" {
				// LEADER in capitals is a binding name, and it is unbound.
				if err == nil {
					t.Fatalf("parsed an unbound binding: %+v", s.Events)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := s.Events[0]
			got.Line = 0
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ text, want string }{
		{"", "no events"},
		{"# only a comment\n", "no events"},
		{"5 kill leader", "bad time"},
		{"-5s kill leader", "bad time"},
		{"5s", "an action must follow"},
		{"5s explode leader", "unknown action"},
		{"5s kill", "needs a node selector"},
		{"5s kill n4", "unknown node selector"},
		{"5s kill leader\n4s heal", "before the previous event"},
		{"5s partition leader", "at least two groups"},
		{"5s partition leader |", "empty group"},
		{"5s partition client | leader client", ""}, // fine: nodes on both sides? no: only one side has nodes
		{"5s cut leader", "exactly two selectors"},
		{"5s kill client", "only appear in a partition"},
		{"5s heal now", "takes no arguments"},
		{"5s netem all", "needs delay= or loss="},
		{"5s netem all delay=fast", "want a duration"},
		{"5s netem all loss=200%", "percentage"},
		{"5s netem all delay=10ms jitter=20ms", "jitter must not exceed"},
		{"5s netem all rate=1mbit", "no parameter"},
		{"5s flap n1 period=1ms", "at least 50ms"},
		{"5s flap n1 every=1s", "no parameter"},
		{"5s kill leader as lower", "capitals"},
		{"5s restart K", "not bound"},
		{"5s end\n6s heal", "nothing may follow"},
		{"5s kill rest", "selects nothing"},
		{"5s kill leader delay=1s", "takes no parameter"},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			_, err := ParseString(tc.text)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "nodes on at least two sides") {
					t.Fatalf("err %v, want nodes on at least two sides", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseFileRelativeTimesAndHeader(t *testing.T) {
	text := `# a scenario
name: demo
description: two faults
2s kill leader as K   # crash the leader
+3s restart K
+2.5s isolate n2
+5s heal
`
	dir := t.TempDir()
	path := filepath.Join(dir, "demo-file.chaos")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "demo" || s.Description != "two faults" || s.Source != path {
		t.Fatalf("header %q %q %q", s.Name, s.Description, s.Source)
	}
	var at []time.Duration
	for _, e := range s.Events {
		at = append(at, e.At)
	}
	want := []time.Duration{2 * time.Second, 5 * time.Second, 7500 * time.Millisecond, 12500 * time.Millisecond}
	if !reflect.DeepEqual(at, want) || s.Duration != want[3] {
		t.Fatalf("times %v (duration %v), want %v", at, s.Duration, want)
	}
	if s.Events[1].Line != 5 {
		t.Fatalf("line %d", s.Events[1].Line)
	}
	// Without a name line, the file name is the name.
	os.WriteFile(path, []byte("1s heal\n"), 0o644)
	if s, _ = ParseFile(path); s.Name != "demo-file" {
		t.Fatalf("name %q", s.Name)
	}
	// Errors carry the file and line.
	os.WriteFile(path, []byte("1s heal\n2s kill nobody\n"), 0o644)
	if _, err := ParseFile(path); err == nil || !strings.Contains(err.Error(), path+":2:") {
		t.Fatalf("err %v", err)
	}
}

func TestFormatRoundTrip(t *testing.T) {
	text := `name: rt
description: every action
1s partition leader client | rest
2s heal
3s cut leader follower
4s netem all delay=100ms jitter=5ms loss=2.5%
5s flap n1 period=700ms
6s heal
7s kill leader as K
8s restart K
9s stop follower as S
10s restart S
11s pause n3
12s resume paused
13s checkpoint
20s end
`
	s, err := ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseString(Format(s))
	if err != nil {
		t.Fatalf("%v\n%s", err, Format(s))
	}
	if !reflect.DeepEqual(s, again) {
		t.Fatalf("round trip changed the scenario:\n%s", Format(s))
	}
}

func TestShippedScenariosParse(t *testing.T) {
	files, _ := filepath.Glob("../../../scripts/chaos/scenarios/*.chaos")
	if len(files) < 6 {
		t.Fatalf("found %d scenario files", len(files))
	}
	for _, f := range files {
		if _, err := ParseFile(f); err != nil {
			t.Error(err)
		}
	}
}

func TestRandomIsReproducible(t *testing.T) {
	o := RandomOptions{Duration: 10 * time.Minute}
	a, err := Random(42, o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Random(42, o)
	if Format(a) != Format(b) {
		t.Fatalf("same seed, different schedules:\n%s\n---\n%s", Format(a), Format(b))
	}
	c, _ := Random(43, o)
	if Format(a) == Format(c) {
		t.Fatalf("seeds 42 and 43 gave the same schedule")
	}
	// The schedule is a valid scenario covering the duration, faults never
	// overlap (each is healed before the next), and it checkpoints.
	if a.Duration < o.Duration || a.Events[len(a.Events)-1].Action != End {
		t.Fatalf("duration %v", a.Duration)
	}
	open := false
	checkpoints := 0
	for _, e := range a.Events {
		switch {
		case e.Action.IsNetwork() || e.Action.IsProcess():
			if open {
				t.Fatalf("line %d: a fault starts while another is active:\n%s", e.Line, Format(a))
			}
			open = true
		case e.Action == Heal || e.Action == Restart || e.Action == Resume:
			open = false
		case e.Action == Checkpoint:
			checkpoints++
		}
	}
	if checkpoints == 0 {
		t.Fatalf("no checkpoint in a 10-minute schedule")
	}
}

func TestRandomProcessOnly(t *testing.T) {
	s, err := Random(7, RandomOptions{Duration: 30 * time.Minute, ProcessOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Events {
		switch e.Action {
		case Cut, Netem, Flap, Wipe:
			t.Fatalf("line %d: %s in a process-only schedule (the docker backend refuses it)", e.Line, e)
		case Partition:
			t.Fatalf("line %d: partition in a process-only schedule", e.Line)
		}
	}
	if len(TemplateNames(true)) >= len(TemplateNames(false)) {
		t.Fatalf("process-only templates %v", TemplateNames(true))
	}
}
