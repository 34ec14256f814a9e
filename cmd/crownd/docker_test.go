package main_test

// The Docker Compose cluster of scripts/docker end to end: the image built
// from the crownd under test, three containers, a leader, a push on one node
// and a pop on another, and `docker kill` of the leader.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	tc "github.com/crownmq/crown/cmd/internal/testcluster"
)

// dockerRun runs a command with a timeout and returns its combined output.
func dockerRun(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (timed out after %v)", err, timeout)
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// composeCommand returns the compose command line prefix: `docker compose`
// (v2) when it works, else `docker-compose` (v1), as the Makefile does.
func composeCommand(docker string) ([]string, error) {
	if _, err := dockerRun(30*time.Second, nil, docker, "compose", "version"); err == nil {
		return []string{docker, "compose"}, nil
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}, nil
	}
	return nil, errors.New(`neither "docker compose" nor "docker-compose" is installed`)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// freeHostPorts returns n loopback ports that were free a moment ago, taken
// below the kernel's ephemeral range: no connect and no bind to port 0
// hands out a port there, so the tests running meanwhile (whose servers
// listen on port 0) cannot take one before docker or crownd binds it. Ports
// picked in the ephemeral range once lost that race in CI ("bind: address
// already in use" from docker's proxy).
func freeHostPorts(t *testing.T, n int) []int {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	span := hi - lo
	start := mrand.IntN(span) // tests picking at once start apart
	var out []int
	for i := 0; i < span && len(out) < n; i++ {
		p := lo + (start+i)%span
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		out = append(out, p)
	}
	if len(out) < n {
		t.Fatalf("only %d free loopback ports in %d-%d", len(out), lo, hi-1)
	}
	return out
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 10000 {
				return n
			}
		}
	}
	return 32768
}

// repoRoot walks up from the working directory to go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// dockerNode is one compose service seen from the host.
type dockerNode struct {
	service string // node1..node3
	client  *tc.Client
}

// dockerLeader waits until one of nodes reports itself leader in a 200
// /health with a term above minTerm and every node in nodes is healthy
// and agrees on it.
func dockerLeader(ctx context.Context, nodes []dockerNode, minTerm uint64, timeout time.Duration) (dockerNode, uint64, error) {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		hs := make([]tc.Health, len(nodes))
		ok := true
		for i, n := range nodes {
			hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			h, err := n.client.Health(hctx)
			cancel()
			if err != nil {
				ok, last = false, fmt.Sprintf("%s: %v", n.service, err)
				break
			}
			hs[i] = h
		}
		for i := 0; ok && i < len(nodes); i++ {
			if hs[i].Raft.State != "Leader" {
				continue
			}
			agree := true
			for _, h := range hs {
				agree = agree && h.HTTPStatus == 200 && h.Raft.LeaderID == nodes[i].service && h.Raft.Term > minTerm
			}
			if agree {
				return nodes[i], hs[i].Raft.Term, nil
			}
		}
		if ok {
			last = ""
			for i, h := range hs {
				last += fmt.Sprintf("%s: %d %s leader %q term %d; ", nodes[i].service, h.HTTPStatus, h.Raft.State,
					h.Raft.LeaderID, h.Raft.Term)
			}
		}
		if time.Now().After(deadline) {
			return dockerNode{}, 0, fmt.Errorf("no agreed leader within %v (last: %s)", timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDockerComposeCluster runs scripts/docker/docker-compose.yml with an
// image built from the crownd under test (FROM scratch, so no registry is
// needed): the three containers elect a leader, a push through one node is
// popped through another, and after `docker kill` of the leader's container
// the two others elect a new leader (higher term) and serve pushes and pops,
// with the earlier message still there. It is skipped only when no Docker
// engine is reachable.
func TestDockerComposeCluster(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("skipped: no Docker engine reachable (no docker CLI in PATH)")
	}
	if out, err := dockerRun(30*time.Second, nil, docker, "info"); err != nil {
		t.Skipf("skipped: no Docker engine reachable (`docker info` failed: %v)", lastLines(out, 2))
	}
	compose, err := composeCommand(docker)
	if err != nil {
		t.Fatalf("a Docker engine is reachable but compose is not: %v", err)
	}
	t.Parallel()
	t0 := time.Now()
	root := repoRoot(t)
	suffix := randomHex(4)

	// The image: bin/docker-context as `make docker-image` prepares it,
	// from the binary the other tests run.
	bctx := t.TempDir()
	bin, err := os.ReadFile(tc.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bctx, "crownd"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(bctx, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	image := "crown-test:" + suffix
	if _, err := dockerRun(5*time.Minute, nil, docker, "build", "-q", "-f",
		filepath.Join(root, "scripts", "docker", "Dockerfile"), "-t", image, bctx); err != nil {
		t.Fatalf("docker build: %v", err)
	}
	t.Cleanup(func() { dockerRun(2*time.Minute, nil, docker, "rmi", "-f", image) })

	ports := freeHostPorts(t, 3)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CROWN_") && !strings.HasPrefix(kv, "QUEEN_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CROWN_IMAGE="+image, "CROWN_BIND=127.0.0.1", "CROWN_LOG_LEVEL=info")
	for i, p := range ports {
		env = append(env, fmt.Sprintf("CROWN_HTTP_PORT_%d=%d", i+1, p))
	}
	project := "crowntest" + suffix
	composeFile := filepath.Join(root, "scripts", "docker", "docker-compose.yml")
	run := func(timeout time.Duration, args ...string) (string, error) {
		full := append(append(append([]string(nil), compose[1:]...), "-p", project, "-f", composeFile), args...)
		return dockerRun(timeout, env, compose[0], full...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(time.Minute, "logs", "--no-color", "--tail", "60")
			t.Logf("---- compose logs (%s) ----\n%s", project, out)
		}
		if _, err := run(3*time.Minute, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Errorf("compose down: %v", err)
		}
	})
	if _, err := run(3*time.Minute, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v", err)
	}
	t.Logf("%s: image %s built, project %s up on ports %v", elapsed(t0), image, project, ports)

	var nodes []dockerNode
	for i, p := range ports {
		nodes = append(nodes, dockerNode{service: fmt.Sprintf("node%d", i+1),
			client: tc.NewClient("http://127.0.0.1:" + strconv.Itoa(p))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader, term, err := dockerLeader(ctx, nodes, 0, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s leads (term %d)", elapsed(t0), leader.service, term)
	var others []dockerNode
	for _, n := range nodes {
		if n.service != leader.service {
			others = append(others, n)
		}
	}

	const queue = "docker"
	push := func(via dockerNode, tx string) string {
		t.Helper()
		res, err := via.client.Retrying(20*time.Second).Push(ctx, []tc.PushItem{{Queue: queue, Partition: "p",
			Payload: map[string]string{"tx": tx}, TransactionID: tx}})
		if err != nil || res[0].Status != "queued" {
			t.Fatalf("push %s via %s: %v %+v", tx, via.service, err, res)
		}
		return res[0].MessageID
	}
	// pop long-polls group through via (a follower may not have applied the
	// push yet) and acks what it gets when ack is set.
	pop := func(via dockerNode, group string, want int, ack bool) []tc.Message {
		t.Helper()
		var got []tc.Message
		deadline := time.Now().Add(20 * time.Second)
		for len(got) < want && time.Now().Before(deadline) {
			msgs, err := via.client.Pop(ctx, queue, tc.PopParams{ConsumerGroup: group, Batch: 10, Wait: true,
				Timeout: 2 * time.Second, AutoAck: !ack})
			if err != nil {
				t.Fatalf("pop %s via %s: %v", group, via.service, err)
			}
			if ack && len(msgs) > 0 {
				acks := make([]tc.Ack, len(msgs))
				for i, m := range msgs {
					acks[i] = tc.AckFor(m, "completed")
				}
				if res, err := via.client.AckBatch(ctx, group, acks); err != nil || !res[len(res)-1].Success {
					t.Fatalf("ack via %s: %v %+v", via.service, err, res)
				}
			}
			got = append(got, msgs...)
		}
		if len(got) != want {
			t.Fatalf("pop %s via %s: %d messages, want %d", group, via.service, len(got), want)
		}
		return got
	}

	id1 := push(others[0], "before-kill")
	if m := pop(others[1], "g", 1, true); m[0].TransactionID != "before-kill" || m[0].ID != id1 {
		t.Fatalf("popped %+v via %s, want before-kill (%s)", m[0], others[1].service, id1)
	}
	t.Logf("%s: pushed via %s, popped via %s", elapsed(t0), others[0].service, others[1].service)

	cid, err := run(time.Minute, "ps", "-q", leader.service)
	cid = strings.TrimSpace(cid)
	if err != nil || cid == "" {
		t.Fatalf("container of %s: %v %q", leader.service, err, cid)
	}
	if _, err := dockerRun(time.Minute, nil, docker, "kill", cid); err != nil {
		t.Fatalf("docker kill %s: %v", leader.service, err)
	}
	killedAt := time.Now()
	newLeader, newTerm, err := dockerLeader(ctx, others, term, 60*time.Second)
	if err != nil {
		t.Fatalf("after docker kill of %s: %v", leader.service, err)
	}
	t.Logf("%s: docker kill of %s; %s leads (term %d) after %v", elapsed(t0), leader.service, newLeader.service,
		newTerm, time.Since(killedAt).Round(time.Millisecond))

	id2 := push(others[1], "after-kill")
	if m := pop(others[0], "g", 1, true); m[0].TransactionID != "after-kill" || m[0].ID != id2 {
		t.Fatalf("popped %+v via %s after the kill, want after-kill (%s)", m[0], others[0].service, id2)
	}
	all := pop(others[1], "fresh", 2, false)
	if all[0].TransactionID != "before-kill" || all[1].TransactionID != "after-kill" {
		t.Fatalf("a fresh group via %s got %s, %s; want before-kill, after-kill", others[1].service,
			all[0].TransactionID, all[1].TransactionID)
	}
	t.Logf("%s: push via %s and pops via %s and %s served by the surviving nodes", elapsed(t0),
		others[1].service, others[0].service, others[1].service)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
