//go:build linux

// Command crown-chaos runs scripted network partitions and process faults
// against a live three-node Crown cluster under a recorded workload, and
// checks the history for lost, duplicated and reordered messages and for
// diverging replicas. See DESIGN.md and docs/chaos.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/checker"
	"github.com/crownmq/crown/cmd/crown-chaos/history"
	"github.com/crownmq/crown/cmd/crown-chaos/nemesis"
	"github.com/crownmq/crown/cmd/crown-chaos/report"
	"github.com/crownmq/crown/cmd/crown-chaos/scenario"
)

// Exit codes.
const (
	exitOK        = 0
	exitViolation = 1 // the checker found a violation, or the cluster did not recover
	exitUsage     = 2
	exitError     = 3 // the harness itself failed (set-up, I/O)
)

type command struct {
	name, args, summary string
	run                 func(args []string, stdout, stderr io.Writer) int
	hidden              bool
}

var commands []command

func init() {
	commands = []command{
		{"run", "[flags]", "start a cluster, run scenarios under the workload, check, write the report", cmdRun, false},
		{"check", "[flags] HISTORY", "check a history file and print the verdict", cmdCheck, false},
		{"report", "[flags] HISTORY", "check a history file and write summary.txt, report.json and timeline.svg", cmdReport, false},
		{"gen", "[flags]", "print a random schedule (same seed, same schedule)", cmdGen, false},
		{"scenarios", "FILE...", "parse scenario files and print them as the runner reads them", cmdScenarios, false},
		{"cleanup", "", "remove the namespaces, links and processes an interrupted run left behind", cmdCleanup, false},
		{"nfq-delay", "[flags]", "(internal) NFQUEUE delayer run inside a node's namespace", cmdNFQ, true},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `crown-chaos: chaos testing for a three-node Crown cluster.

Usage:
  crown-chaos COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintf(w, `
Run "crown-chaos COMMAND --help" for a command's flags. Typical use (as root):
  crown-chaos run --scenario scripts/chaos/scenarios/isolate-leader.chaos --report chaos-report
  crown-chaos run --random --seed 7 --duration 30m --report chaos-report
  crown-chaos check chaos-report/history.jsonl

Exit status: 0 all checks passed, 1 a violation (lost, duplicated or reordered
message, divergence, no recovery, a crashed node), 2 bad usage, 3 harness error.
`)
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "crown-chaos: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func newFlagSet(name, args, summary string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: crown-chaos %s %s\n\n%s\n\nFlags:\n", name, args, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags; it returns -1 to continue, or an exit code.
func parse(fs *flag.FlagSet, args []string) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	return -1
}

// noArgs refuses positional arguments to a command that takes none: a
// stray word (`gen 7` for `gen --seed 7`) must not be silently ignored.
// It returns -1 to continue, or an exit code.
func noArgs(fs *flag.FlagSet, cmd string, stderr io.Writer) int {
	if fs.NArg() == 0 {
		return -1
	}
	fmt.Fprintf(stderr, "crown-chaos %s: unexpected argument %q (it takes flags only; see --help)\n", cmd, fs.Arg(0))
	return exitUsage
}

// positiveDuration refuses a schedule length that is not positive: a bad
// flag value, not a harness error. It returns -1 to continue, or an exit
// code.
func positiveDuration(cmd string, d time.Duration, stderr io.Writer) int {
	if d > 0 {
		return -1
	}
	fmt.Fprintf(stderr, "crown-chaos %s: --duration must be positive, got %s\n", cmd, d)
	return exitUsage
}

// readHistoryArg reads the history named by the one argument of cmd; rc is
// the exit status to return when that fails, -1 otherwise.
func readHistoryArg(fs *flag.FlagSet, cmd string, stderr io.Writer) (ops []history.Op, rc int) {
	if fs.NArg() != 1 {
		fs.Usage()
		return nil, exitUsage
	}
	ops, err := history.ReadFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "crown-chaos %s: %v\n", cmd, err)
		return nil, exitError
	}
	return ops, -1
}

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", "[flags] HISTORY", "Checks a history written by `crown-chaos run` and prints the verdict.\n"+
		"Exit status 1 when a guarantee was broken.", stderr)
	jsonOut := fs.Bool("json", false, "print the result as JSON instead of text")
	requireFinal := fs.Bool("require-final", true, "fail a history without a final converged state")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	ops, rc := readHistoryArg(fs, "check", stderr)
	if rc >= 0 {
		return rc
	}
	// The verdict is the report's: it also counts the failures the run
	// recorded (a node that did not recover, the deletion check), which
	// the checker does not judge.
	rep := report.Build(ops, checker.Check(ops, checker.Options{RequireFinal: *requireFinal}))
	if *jsonOut {
		if err := report.WriteJSON(stdout, rep); err != nil {
			fmt.Fprintln(stderr, "crown-chaos check:", err)
			return exitError
		}
	} else {
		report.WriteText(stdout, rep)
	}
	if !rep.Passed {
		return exitViolation
	}
	return exitOK
}

func cmdReport(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("report", "[flags] HISTORY", "Checks a history and writes summary.txt, report.json and timeline.svg.", stderr)
	dir := fs.String("dir", "", "output directory (default: the history's directory)")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	ops, rc := readHistoryArg(fs, "report", stderr)
	if rc >= 0 {
		return rc
	}
	out := *dir
	if out == "" {
		out = filepath.Dir(fs.Arg(0))
	}
	rep := report.Build(ops, checker.Check(ops, checker.Options{RequireFinal: true}))
	if err := report.WriteDir(out, rep); err != nil {
		fmt.Fprintln(stderr, "crown-chaos report:", err)
		return exitError
	}
	report.WriteText(stdout, rep)
	fmt.Fprintf(stdout, "\nwrote %s\n", strings.Join(report.Files(out), ", "))
	if !rep.Passed {
		return exitViolation
	}
	return exitOK
}

func cmdGen(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("gen", "[flags]", "Prints a random schedule as a scenario file: the same seed and flags always\ngive the same schedule.", stderr)
	seed := fs.Uint64("seed", 1, "seed")
	dur := fs.Duration("duration", 5*time.Minute, "length of the schedule")
	docker := fs.Bool("docker", false, "only faults the docker backend supports")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	if rc := noArgs(fs, "gen", stderr); rc >= 0 {
		return rc
	}
	if rc := positiveDuration("gen", *dur, stderr); rc >= 0 {
		return rc
	}
	s, err := scenario.Random(*seed, scenario.RandomOptions{Duration: *dur, ProcessOnly: *docker})
	if err != nil {
		fmt.Fprintln(stderr, "crown-chaos gen:", err)
		return exitError
	}
	fmt.Fprint(stdout, scenario.Format(s))
	return exitOK
}

func cmdScenarios(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("scenarios", "FILE...", "Parses scenario files and prints them back normalised (times absolute).\n\n"+scenarioHelp(), stderr)
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	rc := exitOK
	for _, f := range fs.Args() {
		s, err := scenario.ParseFile(f)
		if err != nil {
			fmt.Fprintln(stderr, err)
			rc = exitUsage
			continue
		}
		fmt.Fprintf(stdout, "# %s (%s, %d events)\n%s\n", f, s.Duration, len(s.Events), scenario.Format(s))
	}
	return rc
}

func scenarioHelp() string {
	var b strings.Builder
	b.WriteString("Scenario files: one event per line, TIME ACTION [ARGS] [as NAME]; TIME is a duration\n" +
		"from the scenario's start (5s, 1m30s) or +D after the previous line. '#' starts a comment;\n" +
		"`name:` and `description:` lines label the scenario.\n\nActions:\n")
	for _, a := range scenario.Actions {
		fmt.Fprintf(&b, "  %-10s %-32s %s\n", a.Action, a.Args, a.Meaning)
	}
	b.WriteString("\nNode selectors:\n")
	for _, s := range scenario.Selectors {
		fmt.Fprintf(&b, "  %-24s %s\n", s.Name, s.Meaning)
	}
	return b.String()
}

func cmdCleanup(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("cleanup", "", "Removes what an interrupted netns run left behind: processes inside the crown-n1..3\n"+
		"and crown-hub namespaces, the namespaces themselves and link crown-h0. Nothing else is touched.", stderr)
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	if rc := noArgs(fs, "cleanup", stderr); rc >= 0 {
		return rc
	}
	left := nemesis.Leftovers()
	if len(left) == 0 {
		fmt.Fprintln(stdout, "nothing to clean up")
		return exitOK
	}
	err := nemesis.Cleanup(func(f string, a ...any) { fmt.Fprintf(stdout, f+"\n", a...) })
	if err != nil {
		fmt.Fprintln(stderr, "crown-chaos cleanup:", err)
		return exitError
	}
	return exitOK
}

func cmdNFQ(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("nfq-delay", "[flags]", "Internal: holds the packets of NFQUEUE --queue for --delay (+- --jitter) and drops\n"+
		"--loss of them, in the network namespace it runs in, until SIGTERM. Prints \"ready\" once bound.", stderr)
	queue := fs.Uint("queue", 1, "NFQUEUE number")
	delay := fs.Duration("delay", 0, "added latency")
	jitter := fs.Duration("jitter", 0, "random +- variation of the latency")
	loss := fs.Float64("loss", 0, "share of packets dropped (0..1)")
	seed := fs.Uint64("seed", 1, "random seed")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg := nemesis.DelayConfig{Queue: uint16(*queue), Delay: *delay, Jitter: *jitter, Loss: *loss, Seed: *seed}
	if err := nemesis.RunDelayer(ctx, cfg, func() { fmt.Fprintln(stdout, "ready") }); err != nil {
		fmt.Fprintln(stderr, "crown-chaos nfq-delay:", err)
		return exitError
	}
	return exitOK
}
