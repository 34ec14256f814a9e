//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestHelpEverywhere(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"check", "--help"}, {"report", "--help"},
		{"gen", "--help"}, {"scenarios", "--help"}, {"cleanup", "--help"}, {"nfq-delay", "--help"}} {
		var out, errb bytes.Buffer
		if rc := dispatch(args, &out, &errb); rc != exitOK {
			t.Errorf("%v: exit %d", args, rc)
		}
		if out.Len()+errb.Len() == 0 {
			t.Errorf("%v: no help", args)
		}
	}
	var out, errb bytes.Buffer
	if rc := dispatch([]string{"frobnicate"}, &out, &errb); rc != exitUsage {
		t.Fatalf("unknown command: exit %d", rc)
	}
	if rc := dispatch([]string{"run"}, &out, &errb); rc != exitUsage {
		t.Fatalf("run without scenarios: exit %d", rc)
	}
}

func TestGenIsReproducible(t *testing.T) {
	gen := func(seed string) string {
		var out, errb bytes.Buffer
		if rc := dispatch([]string{"gen", "--seed", seed, "--duration", "3m"}, &out, &errb); rc != exitOK {
			t.Fatalf("gen: %d %s", rc, errb.String())
		}
		return out.String()
	}
	a, b := gen("9"), gen("9")
	if a != b || !strings.Contains(a, "name: random-seed-9") {
		t.Fatalf("gen not reproducible:\n%s\n---\n%s", a, b)
	}
}

func TestScenariosCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := dispatch([]string{"scenarios", "../../scripts/chaos/scenarios/kill-leader.chaos"}, &out, &errb); rc != exitOK {
		t.Fatalf("exit %d: %s", rc, errb.String())
	}
	if !strings.Contains(out.String(), "kill leader as K") {
		t.Fatalf("output %s", out.String())
	}
}
