// Package nemesis injects faults into a three-node Crown cluster. A Backend
// owns the cluster: it starts the nodes, signals their processes and cuts
// their network. Two backends exist:
//
//   - Netns (netns.go): three crownd processes, each in its own Linux
//     network namespace on one bridge; partitions are iptables rules inside
//     the namespaces, latency and loss are tc netem (or an NFQUEUE delayer
//     on kernels without netem), flapping is `ip link set down/up`, process
//     faults are signals. Everything it creates is named crown-* and removed
//     by Close (and by Cleanup after a crash).
//   - Docker (docker.go): the Compose cluster of scripts/docker; faults are
//     `docker network disconnect/connect`, `docker kill/start` and `docker
//     pause/unpause`. It supports isolation and process faults only.
package nemesis

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/scenario"
	"github.com/crownmq/crown/cmd/crown-chaos/workload"
)

// Process states.
const (
	Running = "running"
	Paused  = "paused"
	Killed  = "killed"
	Stopped = "stopped" // SIGTERM (clean shutdown) or exited
)

// Backend is a cluster the runner can break.
type Backend interface {
	Name() string
	// Nodes lists node1..node3 with the URLs the workload uses.
	Nodes() []workload.Node
	// Start prepares the environment and starts every node.
	Start(ctx context.Context) error
	// State is a node's process state.
	State(id string) string
	Kill(id string) error
	// Wipe SIGKILLs the node and deletes its data directory (a lost disk);
	// StartNode starts it again with an empty one.
	Wipe(id string) error
	Terminate(id string) error // SIGTERM; returns once the process exited (or after 40 s, SIGKILL)
	StartNode(id string) error // start a killed or stopped node
	Pause(id string) error
	Resume(id string) error
	// Partition makes nodes (and "client") in different groups unable to talk.
	Partition(groups [][]string) error
	// Cut makes a and b unable to talk.
	Cut(a, b []string) error
	Netem(ids []string, p scenario.NetemParams) error
	Flap(ids []string, period time.Duration) error
	// Heal removes every network fault.
	Heal() error
	// Supports reports whether the backend implements an event (with its
	// resolved targets unknown: a static check before the run).
	Supports(ev scenario.Event) error
	// Close stops every node and removes everything Start created.
	Close() error
	// LogPath is where a node's output goes ("" when not a file).
	LogPath(id string) string
}

// NodeIDs are the crownd node ids; selectors n1..n3 name them.
var NodeIDs = []string{"node1", "node2", "node3"}

// Logf reports progress.
type Logf func(format string, args ...any)

// run executes a command and returns its combined output in the error.
func run(ctx context.Context, stdin string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
