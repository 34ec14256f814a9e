package main

// Operability: every crownctl command and subcommand answers --help with
// exit status 0 and usage text.

import (
	"bytes"
	"strings"
	"testing"
)

// Operability brief: "every crownd and crownctl command and subcommand
// answers --help with exit status 0 and usage text". crownctl's own usage
// lists "help" and "version" as commands beside the groups ("Commands: ...
// help  show help for a command: crownctl help cluster status / version
// print crownctl's version"), and says "Global flags (accepted before or
// after any command)" -- --help among them: `crownctl help --help` and
// `crownctl version --help` print usage too.
func TestCLIHelpAndVersionAnswerHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "--help"}, {"help", "-h"}, {"version", "--help"}} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb, func(string) string { return "" })
		text := out.String() + errb.String()
		if code != exitOK || !strings.Contains(text, "Usage") {
			t.Errorf("crownctl %s: exit %d, stdout %q, stderr %q; want exit 0 and usage text",
				strings.Join(args, " "), code, out.String(), errb.String())
		}
	}
}

// Every subcommand of every group (and every group itself) answers --help
// with exit 0 and a usage naming it.
func TestCLIEverySubcommandAnswersHelp(t *testing.T) {
	if len(groups) < 4 {
		t.Fatalf("groups: %d, want cluster, queue, policy and bench", len(groups))
	}
	for _, g := range groups {
		var out, errb bytes.Buffer
		if code := run([]string{g.name, "--help"}, &out, &errb, func(string) string { return "" }); code != exitOK ||
			!strings.Contains(out.String(), "crownctl "+g.name) {
			t.Errorf("crownctl %s --help: exit %d, %q %q", g.name, code, out.String(), errb.String())
		}
		for _, sc := range g.subs {
			for _, h := range []string{"--help", "-h"} {
				var out, errb bytes.Buffer
				code := run([]string{g.name, sc.name, h}, &out, &errb, func(string) string { return "" })
				want := "Usage: crownctl " + g.name + " " + sc.name
				if code != exitOK || !strings.Contains(out.String(), want) {
					t.Errorf("crownctl %s %s %s: exit %d, stdout %q, stderr %q; want exit 0 and %q",
						g.name, sc.name, h, code, out.String(), errb.String(), want)
				}
			}
		}
	}
}
