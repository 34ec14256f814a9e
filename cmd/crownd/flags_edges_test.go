package main

// Tests of crownd's command line, run in-process on parseConfig and
// healthcheck: main turns parseConfig's flag.ErrHelp into exit status 0 and
// any other error into exit status 2, before anything is opened.

import (
	"bytes"
	"errors"
	"flag"
	"strconv"
	"strings"
	"testing"
	"time"
)

func noEnv(string) string { return "" }

// --help is an answer, not an error: the usage goes to stdout (so that
// `crownd --help | less` and `crownd --help > flags.txt` work) and nothing
// to stderr, exit status 0. Project standard: "--help on every command and
// subcommand (exit 0, to stdout)".
func TestHelpGoesToStdout(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help"} {
		var out, errb bytes.Buffer
		_, err := parseConfig([]string{arg}, noEnv, &out, &errb)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("crownd %s: %v, want flag.ErrHelp (exit 0)", arg, err)
		}
		if !strings.Contains(out.String(), "Usage:") || !strings.Contains(out.String(), "--node-id (env CROWN_NODE_ID") {
			t.Errorf("crownd %s: stdout %q, want the usage with every flag", arg, out.String())
		}
		if errb.Len() != 0 {
			t.Errorf("crownd %s: stderr %q, want nothing", arg, errb.String())
		}
	}
	// A bad flag still gets its error and the usage on stderr, nothing on stdout.
	var out, errb bytes.Buffer
	if _, err := parseConfig([]string{"--no-such-flag"}, noEnv, &out, &errb); err == nil || errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--no-such-flag: %v, want an error (exit 2)", err)
	}
	if out.Len() != 0 || !strings.Contains(errb.String(), "no-such-flag") || !strings.Contains(errb.String(), "Usage:") {
		t.Errorf("--no-such-flag: stdout %q, stderr %q; want the error and usage on stderr only", out.String(), errb.String())
	}

	for _, arg := range []string{"--help", "-h"} {
		out.Reset()
		errb.Reset()
		if code := healthcheck([]string{arg}, &out, &errb); code != 0 {
			t.Errorf("crownd healthcheck %s: exit %d, want 0", arg, code)
		}
		if !strings.Contains(out.String(), "Usage: crownd healthcheck") || errb.Len() != 0 {
			t.Errorf("crownd healthcheck %s: stdout %q, stderr %q; want the usage on stdout only", arg, out.String(), errb.String())
		}
	}
}

// A zero or negative value where the flag has no such meaning was taken
// silently as the default (raftnode and httpapi replace a non-positive
// value by theirs): --leader-wait 0 meant 5 s, --raft-trailing-logs 0 meant
// 16384, --commit-inflight -5 meant 1. Project standard: "non-zero with a
// message naming the flag for bad values"; crownd --help documents the
// meaning of each (e.g. "how long a request waits for a leader").
func TestNonPositiveValuesRefused(t *testing.T) {
	base := []string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:7632"}
	if _, err := parseConfig(base, noEnv, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatalf("base command line refused: %v", err)
	}
	for _, c := range []struct{ flag, value string }{
		{"--leader-wait", "0"},
		{"--leader-wait", "-1s"},
		{"--raft-heartbeat-timeout", "0"},
		{"--raft-election-timeout", "-1s"},
		{"--raft-snapshot-log-bytes", "0"},
		{"--raft-snapshot-threshold", "0"},
		{"--raft-trailing-logs", "0"},
		{"--raft-trailing-log-bytes", "0"},
		{"--commit-inflight", "0"},
		{"--commit-inflight", "-5"},
		{"--fsm-writeback", "-1s"},
		{"--fsm-commit-interval", "-1ms"},
		{"--fsm-commit-batches", "0"},
		{"--gc-percent", "0"},
		{"--gc-percent", "-1"},
	} {
		args := append(append([]string(nil), base...), c.flag, c.value)
		_, err := parseConfig(args, noEnv, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || errors.Is(err, flag.ErrHelp) || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("crownd %s %s: %v; want an error naming %s (exit 2)", c.flag, c.value, err, c.flag)
		}
		// The environment variable standing in for the flag is checked the same way.
		env := func(k string) string {
			if k == flagEnv(strings.TrimPrefix(c.flag, "--")) {
				return c.value
			}
			return ""
		}
		if _, err := parseConfig(base, env, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s=%s: %v; want an error naming %s", flagEnv(strings.TrimPrefix(c.flag, "--")), c.value, err, c.flag)
		}
	}
	// The values the help documents as meaningful stay accepted.
	for _, c := range [][]string{{"--fsm-writeback", "0"}, {"--fsm-commit-interval", "0"}, {"--commit-linger", "-1ms"}, {"--commit-linger", "0"}} {
		if _, err := parseConfig(append(append([]string(nil), base...), c...), noEnv, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
			t.Errorf("crownd %v: %v, want accepted", c, err)
		}
	}
}

// A malformed --raft-advertise is reported under its own name: the message
// said `--raft-addr "nope"` although --raft-addr was fine, sending the
// operator to the wrong flag.
func TestBadRaftAdvertiseNamed(t *testing.T) {
	_, err := parseConfig([]string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0",
		"--raft-addr", "127.0.0.1:7632", "--raft-advertise", "nope"}, noEnv, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--raft-advertise") {
		t.Errorf("--raft-advertise nope: %v; want an error naming --raft-advertise", err)
	}
}

// crownd healthcheck tells a bad command line (exit 2, naming what is
// wrong) from an unhealthy node (exit 1): a --timeout of 0 or less meant no
// timeout at all (a probe that can hang forever), a URL without a scheme
// was reported "unhealthy", and extra arguments were ignored.
func TestHealthcheckBadCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "0", "http://127.0.0.1:1"}, "--timeout"},
		{[]string{"--timeout", "-1s", "http://127.0.0.1:1"}, "--timeout"},
		{[]string{"127.0.0.1:6632"}, "127.0.0.1:6632"},
		{[]string{"ftp://127.0.0.1:6632"}, "ftp://127.0.0.1:6632"},
		{[]string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, "http://127.0.0.1:2"},
	} {
		var out, errb bytes.Buffer
		code := healthcheck(c.args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("crownd healthcheck %q: exit %d, stderr %q; want exit 2 naming %q", c.args, code, errb.String(), c.want)
		}
	}
	// An unreachable node is unhealthy, not a bad command line.
	var out, errb bytes.Buffer
	if code := healthcheck([]string{"--timeout", "2s", "http://127.0.0.1:1"}, &out, &errb); code != 1 {
		t.Errorf("healthcheck of a dead address: exit %d, want 1 (stderr %q)", code, errb.String())
	}
}

// --forward-protocol takes relay (the default) or http; anything else is
// refused naming the flag, from the command line and from its variable.
func TestForwardProtocolValues(t *testing.T) {
	base := []string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:7632"}
	for _, v := range []string{"relay", "http"} {
		c, err := parseConfig(append(append([]string(nil), base...), "--forward-protocol", v), noEnv, &bytes.Buffer{}, &bytes.Buffer{})
		if err != nil || c.ForwardProtocol != v {
			t.Errorf("--forward-protocol %s: %v, want accepted", v, err)
		}
	}
	if c, err := parseConfig(base, noEnv, &bytes.Buffer{}, &bytes.Buffer{}); err != nil || c.ForwardProtocol != "relay" {
		t.Errorf("default forward protocol %q (%v), want relay", c.ForwardProtocol, err)
	}
	for _, v := range []string{"", "udp", "HTTP/2"} {
		if _, err := parseConfig(append(append([]string(nil), base...), "--forward-protocol", v), noEnv, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--forward-protocol") {
			t.Errorf("--forward-protocol %q: %v, want an error naming the flag", v, err)
		}
		env := func(k string) string {
			if k == "CROWN_FORWARD_PROTOCOL" {
				return v
			}
			return ""
		}
		if v != "" {
			if _, err := parseConfig(base, env, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--forward-protocol") {
				t.Errorf("CROWN_FORWARD_PROTOCOL=%s: %v, want an error naming the flag", v, err)
			}
		}
	}
}

// ojs-queues.md 0.4: "Limits (Crown choice; each is also a server flag)".
// The OJS admin body (1 MiB) and queue count (10 000) limits had no flag.
// They are read from --ojs-max-body-bytes and --ojs-max-queues (or their
// environment variables), and refused, naming the flag, outside their
// ranges: a body over Queen's 16 MiB could not be relayed to the leader.
func TestOJSLimitFlags(t *testing.T) {
	base := []string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:7632"}
	c, err := parseConfig(base, noEnv, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil || c.OJSMaxBodyBytes != 1<<20 || c.OJSMaxQueues != 10000 {
		t.Fatalf("defaults: %v, body %d, queues %d; want 1 MiB and 10000", err, c.OJSMaxBodyBytes, c.OJSMaxQueues)
	}
	c, err = parseConfig(append(append([]string(nil), base...), "--ojs-max-body-bytes", "2048", "--ojs-max-queues", "3"),
		noEnv, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil || c.OJSMaxBodyBytes != 2048 || c.OJSMaxQueues != 3 {
		t.Fatalf("--ojs-max-body-bytes 2048 --ojs-max-queues 3: %v, body %d, queues %d", err, c.OJSMaxBodyBytes, c.OJSMaxQueues)
	}
	env := func(k string) string { return map[string]string{"CROWN_OJS_MAX_QUEUES": "7"}[k] }
	if c, err = parseConfig(base, env, &bytes.Buffer{}, &bytes.Buffer{}); err != nil || c.OJSMaxQueues != 7 {
		t.Fatalf("CROWN_OJS_MAX_QUEUES=7: %v, queues %d", err, c.OJSMaxQueues)
	}
	for _, bad := range [][]string{{"--ojs-max-body-bytes", "0"}, {"--ojs-max-body-bytes", "16777217"},
		{"--ojs-max-queues", "0"}, {"--ojs-max-queues", "4294967296"}} {
		_, err := parseConfig(append(append([]string(nil), base...), bad...), noEnv, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || errors.Is(err, flag.ErrHelp) || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("crownd %v: %v; want an error naming %s (exit 2)", bad, err, bad[0])
		}
	}
}

// RETENTION_INTERVAL in milliseconds too large for a time.Duration wrapped:
// 10000000000000 became a negative interval, which the maintenance timers
// replaced by their default of 5 s without a word, and 18446744073710 an
// interval of 448 µs. What parseMillis accepts is the duration it was given.
func FuzzParseMillis(f *testing.F) {
	for _, s := range []string{"200", "5s", "0", "-1", "1h30m", "10000000000000", "18446744073710", "9223372036854775807", "9223372036854"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := parseMillis(v)
		if err != nil {
			return
		}
		if d <= 0 {
			t.Fatalf("parseMillis(%q) = %v, want a positive duration or an error", v, d)
		}
		if ms, perr := strconv.ParseInt(v, 10, 64); perr == nil && (d%time.Millisecond != 0 || int64(d/time.Millisecond) != ms) {
			t.Fatalf("parseMillis(%q) = %v, not %d ms", v, d, ms)
		}
	})
}

func TestRetentionIntervalTooLongRefused(t *testing.T) {
	base := []string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:7632"}
	for _, v := range []string{"10000000000000", "18446744073710"} {
		env := func(k string) string {
			if k == "RETENTION_INTERVAL" {
				return v
			}
			return ""
		}
		if _, err := parseConfig(base, env, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "RETENTION_INTERVAL") {
			t.Errorf("RETENTION_INTERVAL=%s: %v; want an error naming it", v, err)
		}
	}
}
