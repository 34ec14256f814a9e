package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/crownmq/crown/cmd/internal/benchkit"
)

// startNATS runs a single JetStream-enabled nats-server on a free loopback
// port, or skips the test when nats-server is not installed (Debian:
// apt-get install nats-server; scripts/bench-vs-nats.sh installs it).
func startNATS(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts nats-server")
	}
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, err := os.Stat("/usr/sbin/nats-server"); err != nil {
			t.Skip("nats-server is not installed")
		}
		bin = "/usr/sbin/nats-server"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var logBuf bytes.Buffer
	cmd := exec.Command(bin, "-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("nats-server log:\n%s", logBuf.String())
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "nats://" + addr
}

func runNatsbench(t *testing.T, args ...string) (*benchkit.Report, int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	var rep benchkit.Report
	if out.Len() > 0 {
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("natsbench %v: exit %d, not a report: %v\n%s\n%s", args, code, err, out.String(), errb.String())
		}
	}
	return &rep, code, errb.String()
}

func TestNatsbench(t *testing.T) {
	u := startNATS(t)
	rep, code, stderr := runNatsbench(t, "--url", u, "--json", "--count", "3000", "--producers", "3",
		"--consumers", "3", "--progress", "off")
	if code != 0 || !rep.OK {
		t.Fatalf("exit %d: %s\n%+v", code, stderr, rep)
	}
	if rep.Broker != "jetstream" || rep.Produce.Messages != 3000 || rep.Consume.Messages != 3000 ||
		rep.Verification[0].Unique != 3000 || !strings.Contains(strings.Join(rep.Notes, " "), "work-queue") {
		t.Fatalf("report %+v", rep)
	}

	// Two groups (interest retention) over two streams, produced first and
	// consumed by a second run.
	rep, code, stderr = runNatsbench(t, "--url", u, "--json", "--mode", "produce", "--count", "2000",
		"--groups", "2", "--queues", "2", "--run-id", "r2", "--progress", "off")
	if code != 0 || rep.Produce.Messages != 2000 {
		t.Fatalf("produce: exit %d: %s", code, stderr)
	}
	rep, code, stderr = runNatsbench(t, "--url", u, "--json", "--mode", "consume", "--count", "2000",
		"--groups", "2", "--queues", "2", "--consumers", "1", "--run-id", "r2", "--idle-timeout", "2s", "--progress", "off")
	if code != 0 || len(rep.Verification) != 2 {
		t.Fatalf("consume: exit %d: %s\n%+v", code, stderr, rep)
	}
	for _, v := range rep.Verification {
		if v.Unique != 2000 || v.Lost != 0 || v.Duplicates != 0 {
			t.Errorf("verification %+v", v)
		}
	}
}

func TestNatsbenchUsage(t *testing.T) {
	for _, args := range [][]string{{"--mode", "x"}, {"extra"}, {"--url", ""}, {"--nope"}} {
		if _, code, _ := runNatsbench(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if _, code, _ := runNatsbench(t, "--help"); code != 0 {
		t.Errorf("--help: exit %d", code)
	}
}
