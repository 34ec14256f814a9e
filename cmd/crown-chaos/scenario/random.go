package scenario

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// RandomOptions shape a random schedule.
type RandomOptions struct {
	// Duration is the length of the schedule (faults start before it; the
	// last heal may end a little after).
	Duration time.Duration
	// ProcessOnly restricts the schedule to faults every backend supports
	// (isolate, kill, stop, pause, and their heals): the Docker flavour.
	ProcessOnly bool
	// MinFault and MaxFault bound how long a fault lasts; MinGap and
	// MaxGap the quiet time between two faults (defaults 3-12 s and 4-10 s).
	MinFault, MaxFault time.Duration
	MinGap, MaxGap     time.Duration
	// CheckpointEvery inserts a convergence checkpoint after this many
	// faults (default 5; negative: never).
	CheckpointEvery int
}

// template is one kind of fault with its heal.
type template struct {
	name    string
	network bool // needs the network namespace backend (a network fault beyond isolate, or a wipe)
	gen     func(r *rand.Rand) (fault, heal string)
}

func ms(r *rand.Rand, lo, hi int) string { return fmt.Sprintf("%dms", lo+r.IntN(hi-lo+1)) }

var templates = []template{
	{"isolate-leader", false, func(*rand.Rand) (string, string) { return "isolate leader", "heal" }},
	{"isolate-follower", false, func(*rand.Rand) (string, string) { return "isolate follower", "heal" }},
	{"split-leader-minority", true, func(*rand.Rand) (string, string) { return "partition leader | rest", "heal" }},
	{"bridge", true, func(*rand.Rand) (string, string) { return "cut leader follower", "heal" }},
	{"netem-all", true, func(r *rand.Rand) (string, string) {
		return fmt.Sprintf("netem all delay=%s jitter=%s loss=%d%%", ms(r, 20, 150), ms(r, 0, 20), r.IntN(6)), "heal"
	}},
	{"netem-leader-loss", true, func(r *rand.Rand) (string, string) {
		return fmt.Sprintf("netem leader delay=%s loss=%d%%", ms(r, 5, 50), 10+r.IntN(21)), "heal"
	}},
	{"flap-follower", true, func(r *rand.Rand) (string, string) {
		return "flap follower period=" + ms(r, 300, 2000), "heal"
	}},
	{"flap-leader", true, func(r *rand.Rand) (string, string) {
		return "flap leader period=" + ms(r, 300, 2000), "heal"
	}},
	{"kill-leader", false, func(*rand.Rand) (string, string) { return "kill leader as K", "restart K" }},
	{"kill-follower", false, func(*rand.Rand) (string, string) { return "kill follower as K", "restart K" }},
	{"stop-leader", false, func(*rand.Rand) (string, string) { return "stop leader as K", "restart K" }},
	{"stop-follower", false, func(*rand.Rand) (string, string) { return "stop follower as K", "restart K" }},
	{"pause-leader", false, func(*rand.Rand) (string, string) { return "pause leader as P", "resume P" }},
	{"pause-follower", false, func(*rand.Rand) (string, string) { return "pause follower as P", "resume P" }},
	{"kill-all", false, func(*rand.Rand) (string, string) { return "kill all", "restart killed" }},
	{"wipe-follower", true, func(*rand.Rand) (string, string) { return "wipe follower as K", "restart K" }},
	{"wipe-leader", true, func(*rand.Rand) (string, string) { return "wipe leader as K", "restart K" }},
}

// TemplateNames lists the fault kinds the generator draws from.
func TemplateNames(processOnly bool) []string {
	var out []string
	for _, t := range templates {
		if !processOnly || !t.network {
			out = append(out, t.name)
		}
	}
	return out
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	// Whole 100 ms steps keep the file readable.
	steps := int64((hi - lo) / (100 * time.Millisecond))
	return lo + time.Duration(r.Int64N(steps+1))*100*time.Millisecond
}

// Random generates a schedule from seed: the same seed and options always
// give the same schedule. Faults never overlap: each is healed before the
// next begins.
func Random(seed uint64, o RandomOptions) (*Scenario, error) {
	if o.Duration <= 0 {
		return nil, fmt.Errorf("random schedule: duration must be positive")
	}
	if o.MinFault <= 0 {
		o.MinFault = 3 * time.Second
	}
	if o.MaxFault < o.MinFault {
		o.MaxFault = max(12*time.Second, o.MinFault)
	}
	if o.MinGap <= 0 {
		o.MinGap = 4 * time.Second
	}
	if o.MaxGap < o.MinGap {
		o.MaxGap = max(10*time.Second, o.MinGap)
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = 5
	}
	var pool []template
	for _, t := range templates {
		if !o.ProcessOnly || !t.network {
			pool = append(pool, t)
		}
	}
	r := rand.New(rand.NewPCG(seed, 0x63686173))
	var text string
	add := func(at time.Duration, line string) {
		text += fmt.Sprintf("%-8s %s\n", FormatTime(at), line)
	}
	kind := "network and process"
	if o.ProcessOnly {
		kind = "process and isolation"
	}
	text += fmt.Sprintf("name: random-seed-%d\ndescription: random %s faults for %s (seed %d)\n", seed, kind, o.Duration, seed)
	t := between(r, 2*time.Second, 4*time.Second)
	n := 0
	for t < o.Duration {
		tp := pool[r.IntN(len(pool))]
		fault, heal := tp.gen(r)
		d := between(r, o.MinFault, o.MaxFault)
		add(t, fault)
		add(t+d, heal)
		n++
		t += d
		if o.CheckpointEvery > 0 && n%o.CheckpointEvery == 0 {
			t += 2 * time.Second
			add(t, "checkpoint")
		}
		t += between(r, o.MinGap, o.MaxGap)
	}
	add(t, "end")
	s, err := ParseString(text)
	if err != nil {
		return nil, fmt.Errorf("random schedule does not parse (a bug): %w\n%s", err, text)
	}
	return s, nil
}

// ParseString parses a scenario held in a string.
func ParseString(text string) (*Scenario, error) {
	return Parse(strings.NewReader(text))
}
