package main_test

// Claims of README.md, docs/*.md and the DESIGN.md
// files that a machine can check against the binaries, so that they cannot
// silently rot.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// docsRoot is the module root (this file lives in cmd/crownd).
func docsRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// docsFiles are the documents whose claims these tests check.
func docsFiles(t *testing.T) map[string]string {
	t.Helper()
	root := docsRoot(t)
	paths := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "*/DESIGN.md", "cmd/*/DESIGN.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			paths = append(paths, rel)
		}
	}
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		out[p] = string(b)
	}
	return out
}

// docsShBlock returns the first ```sh block after the heading that
// starts with heading.
func docsShBlock(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading)
	if i < 0 {
		t.Fatalf("heading %q not found", heading)
	}
	rest := doc[i:]
	j := strings.Index(rest, "```sh\n")
	if j < 0 {
		t.Fatalf("no sh block after %q", heading)
	}
	rest = rest[j+len("```sh\n"):]
	k := strings.Index(rest, "\n```")
	if k < 0 {
		t.Fatalf("unterminated sh block after %q", heading)
	}
	return rest[:k+1]
}

// docsAnswer is one HTTP answer a documented curl command got.
type docsAnswer struct {
	Status int
	Body   string
}

// docsRunCurlBlock runs a documented sh block with $C pointing at
// base and curl wrapped so that every call records its status and body.
func docsRunCurlBlock(t *testing.T, block, base string) []docsAnswer {
	t.Helper()
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	dir := t.TempDir()
	// The block's own C=... line is dropped: C is the test node.
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if !strings.HasPrefix(l, "C=") {
			lines = append(lines, l)
		}
	}
	script := fmt.Sprintf(`set -u
n=0
curl() {
	n=$((n+1))
	command curl -sS -o %[1]q/body.$n -w '%%{http_code}' "$@" >%[1]q/status.$n
}
C=%[2]q
%[3]s
echo $n >%[1]q/count
`, dir, base, strings.Join(lines, "\n"))
	cmd := exec.Command("bash", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("running the documented commands: %v\n%s", err, stderr.String())
	}
	cb, err := os.ReadFile(filepath.Join(dir, "count"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	fmt.Sscan(string(cb), &n)
	if n == 0 {
		t.Fatal("the block ran no curl command")
	}
	out := make([]docsAnswer, n)
	for i := range n {
		sb, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("status.%d", i+1)))
		bb, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("body.%d", i+1)))
		fmt.Sscan(string(sb), &out[i].Status)
		out[i].Body = string(bb)
	}
	return out
}

// docsCurlLines lists the documented curl commands in order (a
// command continued on the next line is reported by its first line).
func docsCurlLines(block string) []string {
	var out []string
	for _, l := range strings.Split(block, "\n") {
		for _, part := range strings.Split(l, "; ") {
			if p := strings.TrimSpace(part); strings.HasPrefix(p, "curl ") {
				out = append(out, p)
			}
		}
	}
	return out
}

// README "Operating queues (OJS administration)" and docs/queues.md
// "Operator's guide" show curl commands for the OJS API, and ojs-queues.md
// section 0 (Conventions) says: "Accepted request content types:
// `application/openjobspec+json`, `application/json` ... A body with any
// other content type gets 400 `invalid_request`." `curl -d` without -H
// sends `application/x-www-form-urlencoded`, which would be refused, and
// the rest of the README's walk-through would then fail with it. Every
// documented OJS call must be accepted as written (and the README's, a
// sequence meant to be pasted, must succeed from first to last).
func TestDocsOJSExamplesAreAccepted(t *testing.T) {
	docs := docsFiles(t)
	cases := []struct {
		file, heading  string
		allMustSucceed bool
	}{
		{"README.md", "## Operating queues", true},
		// The guide also deletes old-payments, which it never created: only
		// the content type is checked there.
		{"docs/queues.md", "## Operator's guide", false},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			block := docsShBlock(t, docs[c.file], c.heading)
			cl := tc.Start(t, 1)
			answers := docsRunCurlBlock(t, block, cl.Node(0).URL())
			cmds := docsCurlLines(block)
			for i, a := range answers {
				what := fmt.Sprintf("curl #%d", i+1)
				if i < len(cmds) {
					what += " (" + cmds[i] + ")"
				}
				refusedType := strings.Contains(a.Body, `"unsupported_content_type"`)
				if refusedType || (c.allMustSucceed && (a.Status < 200 || a.Status > 299)) {
					t.Errorf("%s: %s: HTTP %d %.300s", c.file, what, a.Status, a.Body)
				}
			}
		})
	}
}

// docsHelp runs a binary with args and returns what it printed
// (usage goes to stderr or stdout depending on the tool).
func docsHelp(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "CROWN_URL=")
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// docsBuild returns the binary of ./cmd/<name>: beside crownd when
// CROWN_BIN holds it, else built into a temporary directory.
func docsBuild(t *testing.T, name string) string {
	t.Helper()
	if p := filepath.Join(filepath.Dir(tc.Binary(t)), name); fileExists(p) {
		return p
	}
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
	cmd.Dir = docsRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, b)
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

var (
	docsHelpFlagRe = regexp.MustCompile(`(?m)^\s*--?([a-z][a-z0-9-]*)`)
	docsDocFlagRe  = regexp.MustCompile("(?:^|[\\s`(\"'\\[])--([a-z][a-z0-9-]+)")
	// "`--leader-wait` (5 s)", "(default 5 s)", "`--fsm-writeback`, 250 ms)".
	docsDefaultRe = regexp.MustCompile("`--([a-z][a-z0-9-]*)`(?:,| \\((?:default )?)\\s*([0-9]+(?:\\.[0-9]+)?) ?(ms|s|min)\\b")
	docsCrowndDef = regexp.MustCompile(`(?m)^  --([a-z0-9-]+) \(env [A-Z_]+, default "([^"]*)"\)`)
	docsGoFlagDef = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)[^\n]*\n\s+[^\n]*\(default ([^)]*)\)`)
)

// Every flag the documents name (`--leader-wait`, `crownctl bench run
// --mode`, `crown-chaos run --settle`, ...) exists in the --help of a Crown
// tool or script (or is one of the few flags of docker, iptables and
// iptables-restore the chaos design quotes), and every default a document
// states for a flag, "`--leader-wait` (5 s)", is the one the tool prints.
// README "Set-up"/"Deployments" and docs/deployments.md: "`crownd --help`
// lists them".
func TestDocsFlagsExistWithTheirDefaults(t *testing.T) {
	crownd := tc.Binary(t)
	crownctl := docsBuild(t, "crownctl")
	chaos := docsBuild(t, "crown-chaos")
	root := docsRoot(t)

	helps := map[string]string{} // tool -> every help text of it
	add := func(tool, text string) { helps[tool] += "\n" + text }
	add("crownd", docsHelp(t, crownd, "--help"))
	add("crownd", docsHelp(t, crownd, "healthcheck", "--help"))
	add("crownctl", docsHelp(t, crownctl, "--help"))
	for group, subs := range map[string][]string{
		"cluster": {"status", "members", "add", "remove", "transfer-leadership"},
		"queue":   {"list", "get", "create", "patch", "pause", "resume", "purge", "delete", "stats"},
		"policy":  {"list", "get", "put", "delete"},
		"bench":   {"run", "compare"},
	} {
		for _, s := range subs {
			add("crownctl", docsHelp(t, crownctl, group, s, "--help"))
		}
	}
	for _, sub := range []string{"run", "check", "report", "gen", "scenarios", "cleanup"} {
		add("crown-chaos", docsHelp(t, chaos, sub, "--help"))
	}
	for _, script := range []string{"cluster.sh", "fuzz.sh", "bench-vs-nats.sh", "bench-partitions.sh", "bench-targets.sh", "bench-ab.sh", "bench-node.sh", "chaos/chaos.sh"} {
		add("scripts", docsHelp(t, "bash", filepath.Join(root, "scripts", script), "--help"))
	}
	known := map[string]bool{
		// Other programs' flags the documents quote.
		"help": true, "alias": true /* docker network connect */, "name": true, /* docker run */
		"noflush": true /* iptables-restore */, "queue-bypass": true, /* iptables NFQUEUE */
	}
	for _, text := range helps {
		for _, m := range docsHelpFlagRe.FindAllStringSubmatch(text, -1) {
			known[m[1]] = true
		}
	}
	if !known["leader-wait"] || !known["mode"] || !known["settle"] {
		t.Fatalf("help texts not read: %v", helps)
	}

	defaults := map[string]string{} // crownd and crown-chaos run flag -> default
	for _, m := range docsCrowndDef.FindAllStringSubmatch(helps["crownd"], -1) {
		defaults[m[1]] = m[2]
	}
	for _, m := range docsGoFlagDef.FindAllStringSubmatch(helps["crown-chaos"], -1) {
		if _, ok := defaults[m[1]]; !ok {
			defaults[m[1]] = strings.Trim(m[2], `"`)
		}
	}

	docs := docsFiles(t)
	names := make([]string, 0, len(docs))
	for n := range docs {
		names = append(names, n)
	}
	sort.Strings(names)
	var flagsSeen, defaultsSeen int
	for _, file := range names {
		for ln, line := range strings.Split(docs[file], "\n") {
			for _, m := range docsDocFlagRe.FindAllStringSubmatch(line, -1) {
				flagsSeen++
				if !known[m[1]] {
					t.Errorf("%s:%d: --%s is not a flag of any Crown tool or script: %q", file, ln+1, m[1], strings.TrimSpace(line))
				}
			}
			for _, m := range docsDefaultRe.FindAllStringSubmatch(line, -1) {
				flag, num, unit := m[1], m[2], m[3]
				defaultsSeen++
				def, ok := defaults[flag]
				if !ok {
					t.Errorf("%s:%d: states a default for --%s, which prints none", file, ln+1, flag)
					continue
				}
				want, err := time.ParseDuration(num + map[string]string{"ms": "ms", "s": "s", "min": "m"}[unit])
				if err != nil {
					t.Fatalf("%s:%d: %v", file, ln+1, err)
				}
				got, err := time.ParseDuration(def)
				if err != nil || got != want {
					t.Errorf("%s:%d: says --%s defaults to %s %s; the tool prints %q", file, ln+1, flag, num, unit, def)
				}
			}
		}
	}
	if flagsSeen < 50 || defaultsSeen < 5 {
		t.Errorf("read %d flag mentions and %d stated defaults: the patterns no longer match the documents", flagsSeen, defaultsSeen)
	}
	t.Logf("%d flag mentions and %d stated defaults checked", flagsSeen, defaultsSeen)
}

// TestDocsClusterStopGrace: docs/deployments.md states how long
// scripts/cluster.sh stop waits after SIGTERM before SIGKILL; an operator
// sizing a maintenance window reads it there, so it must be what the script
// does (its --help says it too).
func TestDocsClusterStopGrace(t *testing.T) {
	root := docsRoot(t)
	help := docsHelp(t, "bash", filepath.Join(root, "scripts", "cluster.sh"), "--help")
	m := regexp.MustCompile(`SIGKILL after (\d+) s`).FindStringSubmatch(help)
	if m == nil {
		t.Fatalf("scripts/cluster.sh --help no longer says when stop sends SIGKILL:\n%s", help)
	}
	docs := docsFiles(t)["docs/deployments.md"]
	d := regexp.MustCompile(`cluster\.sh stop .*SIGKILL if still running after (\d+) s`).FindStringSubmatch(docs)
	if d == nil {
		t.Fatal("docs/deployments.md no longer says when scripts/cluster.sh stop sends SIGKILL")
	}
	if d[1] != m[1] {
		t.Errorf("docs/deployments.md says cluster.sh stop sends SIGKILL after %s s; the script waits %s s", d[1], m[1])
	}
}
