package scenario

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The random generator draws from the whole catalogue DESIGN.md lists:
// SIGKILL, SIGTERM and SIGSTOP of the leader and of a follower, with or
// without --docker.
func TestScenarioRandomReachesEveryProcessFault(t *testing.T) {
	for _, processOnly := range []bool{false, true} {
		seen := map[string]int{}
		for seed := uint64(1); seed <= 300; seed++ {
			s, err := Random(seed, RandomOptions{Duration: 10 * time.Minute, ProcessOnly: processOnly})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range s.Events {
				if e.Action.IsProcess() && len(e.Groups) == 1 && len(e.Groups[0]) == 1 {
					seen[string(e.Action)+" "+string(e.Groups[0][0])]++
				}
			}
		}
		for _, want := range []string{"kill leader", "kill follower", "stop leader", "stop follower", "pause leader", "pause follower"} {
			if seen[want] == 0 {
				t.Errorf("processOnly %v: %q never drawn in 300 ten-minute schedules (drawn: %v)", processOnly, want, seen)
			}
		}
	}
}

// A loss must be a percentage from 0 to 100: NaN, which every bound lets
// through, and the infinities are bad scenario lines.
func TestScenarioNetemLossNotANumberRejected(t *testing.T) {
	for _, line := range []string{"5s netem all loss=NaN%", "5s netem leader delay=10ms loss=nan",
		"5s netem all loss=Inf%", "5s netem all delay=10ms loss=-Inf%"} {
		s, err := ParseString(line)
		if err == nil {
			t.Errorf("%q parsed (loss %v, NaN %v); want an error naming loss", line, s.Events[0].Netem.Loss, math.IsNaN(s.Events[0].Netem.Loss))
			continue
		}
		if !strings.Contains(err.Error(), "loss") {
			t.Errorf("%q: error %q does not name loss", line, err)
		}
	}
}

// Format prints a loss as it was written (`scenarios`, `gen` and
// schedule.chaos show it), and what it prints parses back to the same loss.
func TestScenarioFormatNetemLossAsWritten(t *testing.T) {
	for _, pct := range []string{"3", "7", "29", "30", "57", "2.5", "0.001", "99.99", "100"} {
		s, err := ParseString("1s netem all delay=10ms loss=" + pct + "%")
		if err != nil {
			t.Fatal(err)
		}
		got := Format(s)
		if !strings.Contains(got, " loss="+pct+"%") {
			t.Errorf("loss=%s%% formatted as %q", pct, strings.TrimSpace(got))
		}
		back, err := ParseString(got)
		if err != nil {
			t.Fatalf("%q does not parse back: %v", got, err)
		}
		if back.Events[0].Netem.Loss != s.Events[0].Netem.Loss {
			t.Errorf("loss=%s%%: %v after a round trip, %v before", pct, back.Events[0].Netem.Loss, s.Events[0].Netem.Loss)
		}
	}
}

// A node cannot be cut off from itself: a selector on two sides of a cut or
// a partition (however the node is written), or `all` beside another node
// selector, is a bad line that names the node. `random` may fall on either
// side.
func TestScenarioSameNodeOnBothSidesRejected(t *testing.T) {
	for _, tc := range []struct{ line, node string }{
		{"5s cut n1 n1", "n1"},
		{"5s cut node2 n2", "n2"},
		{"5s partition n1 | n1 n2", "n1"},
		{"5s partition n2 n3 | node3", "n3"},
		{"5s cut leader leader", "leader"},
		{"5s partition all | n2", "n2"},
	} {
		s, err := ParseString(tc.line)
		if err == nil {
			t.Errorf("%q parsed as %q; want an error naming the node on both sides", tc.line, s.Events[0])
			continue
		}
		if !strings.Contains(err.Error(), tc.node) {
			t.Errorf("%q: error %q does not name %s", tc.line, err, tc.node)
		}
	}
	for _, line := range []string{"5s cut random random", "5s partition n1 client | n2 n3", "5s partition leader | rest"} {
		if _, err := ParseString(line); err != nil {
			t.Errorf("%q: %v", line, err)
		}
	}
}
