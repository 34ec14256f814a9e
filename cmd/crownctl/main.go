// Command crownctl is Crown's command-line client: it talks to crownd over
// HTTP only.
//
// Commands are grouped (crownctl GROUP SUBCOMMAND ...). A group lives in its
// own file and registers itself in groups below; main.go only parses the
// global flags and dispatches.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const defaultURL = "http://127.0.0.1:6632"

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the request failed
	exitUsage = 2 // bad command line
)

// group is a command group such as "cluster".
type group struct {
	name    string
	summary string
	subs    []subcommand
}

// subcommand is one command of a group. run gets the positional arguments
// left after flag parsing; flags registers subcommand-specific flags and may
// return the value they are parsed into, which run finds in env.opts.
type subcommand struct {
	name    string
	args    string // usage synopsis of the positional arguments, e.g. "ID RAFT_ADDR [HTTP_URL]"
	summary string
	help    string // longer description shown by --help
	minArgs int
	maxArgs int // -1: unlimited
	flags   func(fs *flag.FlagSet) any
	run     func(ctx context.Context, e *env, args []string) error
}

// groups lists every command group; a new group (queue, policy, bench) adds
// itself here from its own file.
var groups = []*group{clusterGroup}

// env is what a command runs with: the global options, the client and the
// output streams.
type env struct {
	urls    string
	json    bool
	timeout time.Duration
	stdout  io.Writer
	stderr  io.Writer
	client  *Client
	opts    any // what the subcommand's flags function returned, parsed
}

// usageError is a bad command line: printed with a hint and exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// globalFlags registers the options every command accepts, before or after
// its name.
func globalFlags(fs *flag.FlagSet, e *env) {
	fs.StringVar(&e.urls, "url", e.urls, "node URL, or a comma-separated list tried in order until one answers; env CROWN_URL")
	fs.BoolVar(&e.json, "json", e.json, "print the server's JSON answer instead of a table")
	fs.DurationVar(&e.timeout, "timeout", e.timeout, "timeout of each request")
}

func newFlagSet(name string, e *env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are printed by run
	globalFlags(fs, e)
	return fs
}

// run is main without the process: it returns the exit code.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	e := &env{urls: defaultURL, timeout: 30 * time.Second, stdout: stdout, stderr: stderr}
	if v := getenv("CROWN_URL"); v != "" {
		e.urls = v
	}
	fs := newFlagSet("crownctl", e)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printMainUsage(stdout, fs)
			return exitOK
		}
		fmt.Fprintf(stderr, "crownctl: %v\nRun 'crownctl --help' for usage.\n", err)
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		printMainUsage(stderr, fs)
		return exitUsage
	}
	switch rest[0] {
	case "help":
		return runHelp(rest[1:], e, stdout, stderr)
	case "version":
		if slices.ContainsFunc(rest[1:], isHelpFlag) {
			fmt.Fprintf(stdout, "Usage: crownctl version\n\nPrints the version of this crownctl.\n")
			return exitOK
		}
		fmt.Fprintf(stdout, "crownctl %s\n", version)
		return exitOK
	}
	g := findGroup(rest[0])
	if g == nil {
		fmt.Fprintf(stderr, "crownctl: unknown command %q\nRun 'crownctl --help' for usage.\n", rest[0])
		return exitUsage
	}
	return runGroup(g, rest[1:], e)
}

func findGroup(name string) *group {
	for _, g := range groups {
		if g.name == name {
			return g
		}
	}
	return nil
}

func (g *group) find(name string) *subcommand {
	for i := range g.subs {
		if g.subs[i].name == name {
			return &g.subs[i]
		}
	}
	return nil
}

// isHelpFlag reports whether a is one of the spellings of --help.
func isHelpFlag(a string) bool {
	return a == "-h" || a == "--help" || a == "-help" || a == "--h"
}

func runHelp(args []string, e *env, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelpFlag(args[0]) {
		printMainUsage(stdout, newFlagSet("crownctl", e))
		return exitOK
	}
	g := findGroup(args[0])
	if g == nil {
		fmt.Fprintf(stderr, "crownctl: unknown command %q\n", args[0])
		return exitUsage
	}
	if len(args) == 1 {
		printGroupUsage(stdout, g)
		return exitOK
	}
	sc := g.find(args[1])
	if sc == nil {
		fmt.Fprintf(stderr, "crownctl %s: unknown command %q\n", g.name, args[1])
		return exitUsage
	}
	fs := newFlagSet("crownctl "+g.name+" "+sc.name, e)
	if sc.flags != nil {
		sc.flags(fs)
	}
	printSubUsage(stdout, g, sc, fs)
	return exitOK
}

func runGroup(g *group, args []string, e *env) int {
	// Global flags may also come between the group and the subcommand.
	fs := newFlagSet("crownctl "+g.name, e)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printGroupUsage(e.stdout, g)
			return exitOK
		}
		fmt.Fprintf(e.stderr, "crownctl %s: %v\nRun 'crownctl %s --help' for usage.\n", g.name, err, g.name)
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		printGroupUsage(e.stderr, g)
		return exitUsage
	}
	if rest[0] == "help" {
		return runHelp(append([]string{g.name}, rest[1:]...), e, e.stdout, e.stderr)
	}
	sc := g.find(rest[0])
	if sc == nil {
		fmt.Fprintf(e.stderr, "crownctl %s: unknown command %q\nRun 'crownctl %s --help' for usage.\n", g.name, rest[0], g.name)
		return exitUsage
	}
	return runSub(g, sc, rest[1:], e)
}

func runSub(g *group, sc *subcommand, args []string, e *env) int {
	name := "crownctl " + g.name + " " + sc.name
	fs := newFlagSet(name, e)
	if sc.flags != nil {
		e.opts = sc.flags(fs)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printSubUsage(e.stdout, g, sc, fs)
			return exitOK
		}
		fmt.Fprintf(e.stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
		return exitUsage
	}
	if len(pos) < sc.minArgs || (sc.maxArgs >= 0 && len(pos) > sc.maxArgs) {
		fmt.Fprintf(e.stderr, "%s: %s\nUsage: %s %s\nRun '%s --help' for usage.\n",
			name, argCountError(sc, len(pos)), name, sc.args, name)
		return exitUsage
	}
	// A NAME goes into the request path: empty, the path would be the
	// listing's ("/ojs/v1/queues/"), answered 200 as if it were a record.
	if strings.HasPrefix(sc.args, "NAME") && len(pos) > 0 && pos[0] == "" {
		fmt.Fprintf(e.stderr, "%s: NAME is empty\nRun '%s --help' for usage.\n", name, name)
		return exitUsage
	}
	if e.timeout <= 0 {
		fmt.Fprintf(e.stderr, "%s: --timeout must be positive\n", name)
		return exitUsage
	}
	client, err := NewClient(e.urls, e.timeout)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	e.client = client
	// Subcommands may read their own flags back through the context (queue.go, flagValue).
	if err := sc.run(context.WithValue(context.Background(), flagSetKey{}, fs), e, pos); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(e.stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
			return exitUsage
		}
		fmt.Fprintf(e.stderr, "%s: %v\n", name, err)
		return exitError
	}
	return exitOK
}

func argCountError(sc *subcommand, n int) string {
	switch {
	case sc.maxArgs == 0:
		return fmt.Sprintf("takes no arguments, got %d", n)
	case n < sc.minArgs:
		return fmt.Sprintf("missing arguments: got %d, need at least %d", n, sc.minArgs)
	default:
		return fmt.Sprintf("too many arguments: got %d, at most %d", n, sc.maxArgs)
	}
}

// parseInterleaved parses flags that may appear before, between or after
// positional arguments; "--" ends flag parsing.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag.Parse stops at the first non-flag or after "--".
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func printMainUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, `crownctl %s: command-line client for Crown, over its HTTP API.

Usage:
  crownctl [global flags] COMMAND SUBCOMMAND [flags] [arguments]

Commands:
`, version)
	sorted := append([]*group(nil), groups...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	for _, g := range sorted {
		fmt.Fprintf(w, "  %-10s %s\n", g.name, g.summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n  %-10s %s\n", "help", "show help for a command: crownctl help cluster status", "version", "print crownctl's version")
	fmt.Fprintln(w, "\nGlobal flags (accepted before or after any command):")
	printFlags(w, fs)
	fmt.Fprintln(w, "\nRun 'crownctl COMMAND --help' for a command's subcommands.")
}

func printGroupUsage(w io.Writer, g *group) {
	fmt.Fprintf(w, "crownctl %s: %s\n\nUsage:\n", g.name, g.summary)
	width := 0
	for _, sc := range g.subs {
		width = max(width, len(sc.name)+1+len(sc.args))
	}
	for _, sc := range g.subs {
		fmt.Fprintf(w, "  crownctl %s %-*s  %s\n", g.name, width, strings.TrimSpace(sc.name+" "+sc.args), sc.summary)
	}
	fmt.Fprintf(w, "\nEvery subcommand accepts --url, --json, --timeout and --help.\nRun 'crownctl %s SUBCOMMAND --help' for details.\n", g.name)
}

func printSubUsage(w io.Writer, g *group, sc *subcommand, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: crownctl %s %s [flags]", g.name, sc.name)
	if sc.args != "" {
		fmt.Fprintf(w, " %s", sc.args)
	}
	fmt.Fprintf(w, "\n\n%s\n", sc.summary)
	if sc.help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(sc.help, "\n"))
	}
	fmt.Fprintln(w, "\nFlags:")
	printFlags(w, fs)
}

func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n      %s", line, usage)
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// printJSON writes a server answer indented, for --json. Numbers are kept
// as the server wrote them.
func printJSON(w io.Writer, raw json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Indent(&b, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}
