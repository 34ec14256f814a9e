// Package scenario reads and writes chaos scenario files and generates
// random schedules.
//
// A scenario is a plain text file: a timed list of faults, one per line.
//
//	# Comments start with '#'; blank lines are ignored.
//	name: isolate-leader
//	description: the leader loses its two peers for ten seconds
//	2s   partition leader | rest
//	12s  heal
//	+3s  kill leader as K       # "+3s" is relative to the previous line
//	+8s  restart K
//	30s  end
//
// Each event line is TIME ACTION [ARGS] [as NAME]. TIME is a Go duration
// from the scenario's start ("5s", "1m30s") or, with a leading '+', from the
// previous event. Times never decrease. The actions, their arguments and the
// node selectors are listed in Actions and Selectors; `as NAME` (NAME in
// capitals) binds the nodes an action resolved to, so that a later line can
// name them again ("kill leader as K" ... "restart K"), because "leader" will
// by then designate another node.
package scenario

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Action is what an event does.
type Action string

// The actions.
const (
	Partition  Action = "partition"  // G1 | G2 [| G3]: nodes in different groups cannot talk
	Isolate    Action = "isolate"    // S: S cannot talk to the other nodes (the client still reaches it)
	Cut        Action = "cut"        // A B: A and B cannot talk; every other link works (a bridge partition)
	Heal       Action = "heal"       // remove every network fault (partitions, netem, flapping links)
	Netem      Action = "netem"      // S delay=D [jitter=D] [loss=P%]: latency and loss on S's outgoing packets
	Flap       Action = "flap"       // S [period=D]: S's link goes down and up every period until heal
	Kill       Action = "kill"       // S: SIGKILL
	Wipe       Action = "wipe"       // S: SIGKILL, then delete the data directory (a lost disk)
	Stop       Action = "stop"       // S: SIGTERM, a clean shutdown
	Restart    Action = "restart"    // S: start the stopped or killed nodes S again
	Pause      Action = "pause"      // S: SIGSTOP
	Resume     Action = "resume"     // S: SIGCONT
	Checkpoint Action = "checkpoint" // pause the workload, wait until the replicas converge, resume
	End        Action = "end"        // the scenario's last instant
)

// Actions lists every action with its argument synopsis and meaning, for
// --help and the documentation.
var Actions = []struct {
	Action   Action
	Args     string
	Meaning  string
	Network  bool // a network fault
	Process  bool // a process fault
	Closes   bool // ends fault windows
	Selector bool // takes node selectors
}{
	{Partition, "G1 | G2 [| G3]", "nodes in different groups cannot talk; `client` in a group cuts the workload from the other groups' nodes", true, false, false, true},
	{Isolate, "S", "S cannot talk to the other nodes; the workload still reaches S", true, false, false, true},
	{Cut, "A B", "A and B cannot talk to each other, every other link works (bridge partition; `bridge` is an alias)", true, false, false, true},
	{Heal, "", "remove every network fault: partitions, cuts, netem, flapping links", false, false, true, false},
	{Netem, "S delay=D [jitter=D] [loss=P%]", "add latency and packet loss on S's outgoing packets", true, false, false, true},
	{Flap, "S [period=D]", "S's link goes down and up every period (default 1s) until heal", true, false, false, true},
	{Kill, "S", "SIGKILL the nodes S", false, true, false, true},
	{Wipe, "S", "SIGKILL the nodes S and delete their data directories, a lost disk (netns backend; the runner wipes no node while an earlier wiped one has not caught up, since two lost disks are a majority)", false, true, false, true},
	{Stop, "S", "SIGTERM the nodes S (clean shutdown)", false, true, false, true},
	{Restart, "S", "start the killed or stopped nodes S again (`restart killed` starts all of them)", false, true, true, true},
	{Pause, "S", "SIGSTOP the nodes S (a hung process whose sockets stay open)", false, true, false, true},
	{Resume, "S", "SIGCONT the paused nodes S (`resume paused` continues all of them)", false, true, true, true},
	{Checkpoint, "", "pause the workload, wait until all nodes report the same digest, resume", false, false, false, false},
	{End, "", "the scenario ends here (default: the last event)", false, false, false, false},
}

// Selectors lists the node selectors.
var Selectors = []struct{ Name, Meaning string }{
	{"n1, n2, n3", "a node by number (node1, node2, node3 are accepted too)"},
	{"leader", "the current leader (the runner waits up to 10 s for one)"},
	{"follower", "the first follower by node id"},
	{"follower2", "the other follower"},
	{"followers", "both followers"},
	{"all", "every node"},
	{"rest", "every node not named earlier on the line"},
	{"random", "one node chosen with the scenario's seed"},
	{"killed, stopped, paused", "the nodes currently in that state (for restart and resume)"},
	{"client", "the workload (only in partition groups)"},
	{"NAME", "the nodes bound by an earlier `... as NAME`"},
}

// Sel is one node selector as written (normalised: n1..n3 for node numbers).
type Sel string

// IsBinding reports whether s names a binding (`as NAME`).
func (s Sel) IsBinding() bool { return isBindingName(string(s)) }

var staticSelectors = []string{"n1", "n2", "n3", "leader", "follower", "follower2", "followers", "all", "rest",
	"random", "killed", "stopped", "paused", "client"}

// Netem holds the parameters of a netem action.
type NetemParams struct {
	Delay  time.Duration
	Jitter time.Duration
	Loss   float64 // 0..1
}

// Event is one line of a scenario.
type Event struct {
	At     time.Duration
	Line   int
	Action Action
	// Groups are the selector groups: one group for most actions, two for
	// cut, two or more for partition.
	Groups [][]Sel
	Netem  NetemParams
	Period time.Duration // flap
	Bind   string        // `as NAME`
}

// Scenario is a parsed scenario file.
type Scenario struct {
	Name        string
	Description string
	Source      string
	Events      []Event
	// Duration is the scenario's end: the `end` line, or the last event.
	Duration time.Duration
}

// String renders the event as a scenario line without its time.
func (e Event) String() string {
	var b strings.Builder
	b.WriteString(string(e.Action))
	sep := " "
	switch e.Action {
	case Partition:
		for i, g := range e.Groups {
			if i > 0 {
				b.WriteString(" |")
			}
			for _, s := range g {
				b.WriteString(sep + string(s))
			}
		}
	default:
		for _, g := range e.Groups {
			for _, s := range g {
				b.WriteString(sep + string(s))
			}
		}
	}
	if e.Action == Netem {
		if e.Netem.Delay > 0 {
			b.WriteString(" delay=" + e.Netem.Delay.String())
		}
		if e.Netem.Jitter > 0 {
			b.WriteString(" jitter=" + e.Netem.Jitter.String())
		}
		if e.Netem.Loss > 0 {
			b.WriteString(" loss=" + percent(e.Netem.Loss) + "%")
		}
	}
	if e.Action == Flap && e.Period > 0 {
		b.WriteString(" period=" + e.Period.String())
	}
	if e.Bind != "" {
		b.WriteString(" as " + e.Bind)
	}
	return b.String()
}

// percent writes a fraction as the percentage it was parsed from. Twelve
// significant digits drop the error of dividing by 100 and multiplying back
// (29% would come back as 28.999999999999996%) without rounding a small
// loss away.
func percent(frac float64) string {
	p, err := strconv.ParseFloat(strconv.FormatFloat(frac*100, 'g', 12, 64), 64)
	if err != nil {
		p = frac * 100
	}
	return strconv.FormatFloat(p, 'f', -1, 64)
}

// Format renders a scenario as a file that Parse reads back unchanged.
func Format(s *Scenario) string {
	var b strings.Builder
	if s.Name != "" {
		fmt.Fprintf(&b, "name: %s\n", s.Name)
	}
	if s.Description != "" {
		fmt.Fprintf(&b, "description: %s\n", s.Description)
	}
	ended := false
	for _, e := range s.Events {
		fmt.Fprintf(&b, "%-8s %s\n", FormatTime(e.At), e)
		ended = e.Action == End
	}
	if !ended && len(s.Events) > 0 && s.Duration > s.Events[len(s.Events)-1].At {
		fmt.Fprintf(&b, "%-8s end\n", FormatTime(s.Duration))
	}
	return b.String()
}

// FormatTime writes a scenario time ("12.5s", "1m30s").
func FormatTime(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	return d.String()
}

// ParseFile reads one scenario file; the name defaults to the file name
// without its extension.
func ParseFile(path string) (*Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s:%w", path, err)
	}
	s.Source = path
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return s, nil
}

// lineError is a parse error at a line; it prints as "LINE: message".
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return fmt.Sprintf("%d: %s", e.line, e.msg) }

// Parse reads a scenario.
func Parse(r io.Reader) (*Scenario, error) {
	s := &Scenario{}
	sc := bufio.NewScanner(r)
	bound := map[string]bool{}
	var prev time.Duration
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		errf := func(format string, a ...any) error {
			return &lineError{line: lineNo, msg: fmt.Sprintf(format, a...)}
		}
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "name" || k == "description") {
			if k == "name" {
				s.Name = strings.TrimSpace(v)
			} else {
				s.Description = strings.TrimSpace(v)
			}
			continue
		}
		if len(s.Events) > 0 && s.Events[len(s.Events)-1].Action == End {
			return nil, errf("nothing may follow `end`")
		}
		fields := strings.Fields(line)
		at, err := parseTime(fields[0], prev)
		if err != nil {
			return nil, errf("%v", err)
		}
		if at < prev {
			return nil, errf("time %s is before the previous event (%s)", FormatTime(at), FormatTime(prev))
		}
		if len(fields) < 2 {
			return nil, errf("an action must follow the time")
		}
		ev, err := parseEvent(fields[1], fields[2:], bound)
		if err != nil {
			return nil, errf("%v", err)
		}
		ev.At, ev.Line = at, lineNo
		if ev.Bind != "" {
			bound[ev.Bind] = true
		}
		s.Events = append(s.Events, ev)
		prev = at
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(s.Events) == 0 {
		return nil, &lineError{line: lineNo, msg: "no events"}
	}
	s.Duration = s.Events[len(s.Events)-1].At
	return s, nil
}

func parseTime(tok string, prev time.Duration) (time.Duration, error) {
	rel := strings.HasPrefix(tok, "+")
	d, err := time.ParseDuration(strings.TrimPrefix(tok, "+"))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("bad time %q (want a duration such as 5s or +2.5s)", tok)
	}
	if rel {
		d += prev
	}
	return d, nil
}

func isBindingName(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for _, c := range s {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

func normSel(tok string, bound map[string]bool) (Sel, error) {
	if isBindingName(tok) {
		if !bound[tok] {
			return "", fmt.Errorf("%s is not bound by an earlier `as %s`", tok, tok)
		}
		return Sel(tok), nil
	}
	t := strings.ToLower(tok)
	if strings.HasPrefix(t, "node") {
		t = "n" + strings.TrimPrefix(t, "node")
	}
	if !slices.Contains(staticSelectors, t) {
		return "", fmt.Errorf("unknown node selector %q (see --help)", tok)
	}
	return Sel(t), nil
}

func parseEvent(name string, args []string, bound map[string]bool) (Event, error) {
	ev := Event{Action: Action(strings.ToLower(name))}
	if ev.Action == "bridge" {
		ev.Action = Cut
	}
	// `as NAME` at the end.
	if n := len(args); n >= 2 && args[n-2] == "as" {
		if !isBindingName(args[n-1]) {
			return ev, fmt.Errorf("binding name %q must be in capitals (A-Z, 0-9, _)", args[n-1])
		}
		ev.Bind = args[n-1]
		args = args[:n-2]
	}
	// key=value parameters.
	var sels []string
	params := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			params[strings.ToLower(k)] = v
			continue
		}
		sels = append(sels, a)
	}
	selectors := func(toks []string) ([]Sel, error) {
		var out []Sel
		for _, t := range toks {
			s, err := normSel(t, bound)
			if err != nil {
				return nil, err
			}
			if s == "client" && ev.Action != Partition {
				return nil, fmt.Errorf("`client` may only appear in a partition group")
			}
			out = append(out, s)
		}
		return out, nil
	}
	noParams := func() error {
		for k := range params {
			return fmt.Errorf("%s takes no parameter %q", ev.Action, k)
		}
		return nil
	}
	switch ev.Action {
	case Heal, Checkpoint, End:
		if len(sels) > 0 || len(params) > 0 || ev.Bind != "" {
			return ev, fmt.Errorf("%s takes no arguments", ev.Action)
		}
		return ev, nil
	case Partition:
		if err := noParams(); err != nil {
			return ev, err
		}
		var group []string
		var groups [][]string
		for _, t := range sels {
			if t == "|" {
				groups = append(groups, group)
				group = nil
				continue
			}
			// "a|b" written without spaces
			for i, part := range strings.Split(t, "|") {
				if i > 0 {
					groups = append(groups, group)
					group = nil
				}
				if part != "" {
					group = append(group, part)
				}
			}
		}
		groups = append(groups, group)
		if len(groups) < 2 {
			return ev, fmt.Errorf("partition needs at least two groups separated by |")
		}
		for _, g := range groups {
			if len(g) == 0 {
				return ev, fmt.Errorf("partition has an empty group")
			}
			s, err := selectors(g)
			if err != nil {
				return ev, err
			}
			ev.Groups = append(ev.Groups, s)
		}
		nodes := 0
		for _, g := range ev.Groups {
			if !(len(g) == 1 && g[0] == "client") {
				nodes++
			}
		}
		if nodes < 2 {
			return ev, fmt.Errorf("partition needs nodes on at least two sides")
		}
		if err := oneSideEach(ev.Groups); err != nil {
			return ev, err
		}
		return ev, nil
	case Cut:
		if err := noParams(); err != nil {
			return ev, err
		}
		if len(sels) != 2 {
			return ev, fmt.Errorf("cut needs exactly two selectors (cut A B)")
		}
		for _, t := range sels {
			s, err := selectors([]string{t})
			if err != nil {
				return ev, err
			}
			ev.Groups = append(ev.Groups, s)
		}
		if err := oneSideEach(ev.Groups); err != nil {
			return ev, err
		}
		return ev, nil
	case Netem:
		for k, v := range params {
			switch k {
			case "delay", "jitter":
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 {
					return ev, fmt.Errorf("netem %s=%q: want a duration such as 100ms", k, v)
				}
				if k == "delay" {
					ev.Netem.Delay = d
				} else {
					ev.Netem.Jitter = d
				}
			case "loss":
				p, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
				if err != nil || math.IsNaN(p) || p < 0 || p > 100 { // ParseFloat takes "NaN", which no bound rejects
					return ev, fmt.Errorf("netem loss=%q: want a percentage such as 10%%", v)
				}
				ev.Netem.Loss = p / 100
			default:
				return ev, fmt.Errorf("netem has no parameter %q (delay, jitter, loss)", k)
			}
		}
		if ev.Netem.Delay == 0 && ev.Netem.Loss == 0 {
			return ev, fmt.Errorf("netem needs delay= or loss=")
		}
		if ev.Netem.Jitter > ev.Netem.Delay {
			return ev, fmt.Errorf("netem jitter must not exceed delay")
		}
	case Flap:
		for k, v := range params {
			if k != "period" {
				return ev, fmt.Errorf("flap has no parameter %q (period)", k)
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < 50*time.Millisecond {
				return ev, fmt.Errorf("flap period=%q: want a duration of at least 50ms", v)
			}
			ev.Period = d
		}
	case Isolate, Kill, Wipe, Stop, Restart, Pause, Resume:
		if err := noParams(); err != nil {
			return ev, err
		}
	default:
		return ev, fmt.Errorf("unknown action %q (see --help)", name)
	}
	if len(sels) == 0 {
		return ev, fmt.Errorf("%s needs a node selector", ev.Action)
	}
	s, err := selectors(sels)
	if err != nil {
		return ev, err
	}
	for _, x := range s {
		if x == "rest" && len(s) == 1 {
			return ev, fmt.Errorf("`rest` alone selects nothing here")
		}
	}
	ev.Groups = [][]Sel{s}
	return ev, nil
}

// oneSideEach refuses a node on more than one side of a cut or partition:
// a node cannot be cut off from itself. A selector resolves to the same
// nodes wherever it appears in one line, except `random`; `all` takes every
// node, so nothing but the client can stand on another side.
func oneSideEach(groups [][]Sel) error {
	side := map[Sel]int{}
	for i, g := range groups {
		for _, s := range g {
			if s == "random" {
				continue
			}
			if j, ok := side[s]; ok && j != i {
				return fmt.Errorf("%s is on more than one side: a node cannot be cut off from itself", s)
			}
			side[s] = i
		}
	}
	for i, g := range groups {
		if !slices.Contains(g, "all") {
			continue
		}
		for j, o := range groups {
			for _, s := range o {
				if j != i && s != "client" {
					return fmt.Errorf("%s is on another side than all, which already has every node", s)
				}
			}
		}
	}
	return nil
}

// IsNetwork reports whether the action is a network fault.
func (a Action) IsNetwork() bool {
	switch a {
	case Partition, Isolate, Cut, Netem, Flap:
		return true
	}
	return false
}

// IsProcess reports whether the action is a process fault (it opens a fault window).
func (a Action) IsProcess() bool {
	switch a {
	case Kill, Wipe, Stop, Pause:
		return true
	}
	return false
}
