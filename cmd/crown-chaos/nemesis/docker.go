package nemesis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/scenario"
	"github.com/crownmq/crown/cmd/crown-chaos/workload"
)

// DockerConfig configures the Docker Compose backend.
type DockerConfig struct {
	ComposeFile string // scripts/docker/docker-compose.yml
	Project     string // compose project name (default crownchaos)
	Image       string // CROWN_IMAGE (default crown:latest)
	FirstPort   int    // host port of node1's API; node2 and node3 follow (default 16632)
	LogDir      string
	Logf        Logf
}

// Docker drives the Compose cluster of scripts/docker under its own
// project name and ports, so it never meets a `make docker-cluster` of the
// same machine. Isolation is `docker network disconnect` (which also cuts
// the node from the workload: its published port goes with the network),
// healing is `docker network connect` with the service alias; process faults
// are docker kill/start and pause/unpause (the cgroup freezer).
type Docker struct {
	cfg     DockerConfig
	compose []string

	mu           sync.Mutex
	ids          map[string]string // node id -> container id
	state        map[string]string
	disconnected map[string]bool
	started      bool
}

// NewDocker returns the backend; Start brings the cluster up from scratch.
func NewDocker(cfg DockerConfig) *Docker {
	if cfg.Project == "" {
		cfg.Project = "crownchaos"
	}
	if cfg.Image == "" {
		cfg.Image = "crown:latest"
	}
	if cfg.FirstPort == 0 {
		cfg.FirstPort = 16632
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Docker{cfg: cfg, ids: map[string]string{}, state: map[string]string{}, disconnected: map[string]bool{}}
}

// Name implements Backend.
func (d *Docker) Name() string { return "docker" }

// Nodes implements Backend.
func (d *Docker) Nodes() []workload.Node {
	out := make([]workload.Node, len(NodeIDs))
	for i, id := range NodeIDs {
		out[i] = workload.Node{ID: id, URL: fmt.Sprintf("http://127.0.0.1:%d", d.cfg.FirstPort+i)}
	}
	return out
}

// LogPath implements Backend: logs are collected into LogDir on Close.
func (d *Docker) LogPath(id string) string {
	if d.cfg.LogDir == "" {
		return ""
	}
	return d.cfg.LogDir + "/" + id + ".log"
}

func (d *Docker) network() string { return d.cfg.Project + "_default" }

func (d *Docker) composeCmd(ctx context.Context, args ...string) (string, error) {
	all := append(append([]string{}, d.compose[1:]...), "-p", d.cfg.Project, "-f", d.cfg.ComposeFile)
	all = append(all, args...)
	cmd := exec.CommandContext(ctx, d.compose[0], all...)
	cmd.Env = append(os.Environ(), "CROWN_IMAGE="+d.cfg.Image,
		fmt.Sprintf("CROWN_HTTP_PORT_1=%d", d.cfg.FirstPort), fmt.Sprintf("CROWN_HTTP_PORT_2=%d", d.cfg.FirstPort+1),
		fmt.Sprintf("CROWN_HTTP_PORT_3=%d", d.cfg.FirstPort+2), "CROWN_BIND=127.0.0.1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", d.compose[0], strings.Join(all, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Start implements Backend: `down -v` (a fresh cluster), `up -d`.
func (d *Docker) Start(ctx context.Context) error {
	if exec.Command("docker", "compose", "version").Run() == nil {
		d.compose = []string{"docker", "compose"}
	} else if _, err := exec.LookPath("docker-compose"); err == nil {
		d.compose = []string{"docker-compose"}
	} else {
		return errors.New("neither `docker compose` nor docker-compose is installed")
	}
	if _, err := run(ctx, "", "docker", "image", "inspect", d.cfg.Image); err != nil {
		return fmt.Errorf("image %s not found: run make docker-image", d.cfg.Image)
	}
	_, _ = d.composeCmd(ctx, "down", "-v", "--remove-orphans")
	d.mu.Lock()
	d.started = true
	d.mu.Unlock()
	if _, err := d.composeCmd(ctx, "up", "-d"); err != nil {
		return err
	}
	for _, id := range NodeIDs {
		out, err := d.composeCmd(ctx, "ps", "-q", id)
		if err != nil {
			return err
		}
		cid := strings.TrimSpace(out)
		if cid == "" {
			return fmt.Errorf("no container for %s", id)
		}
		d.mu.Lock()
		d.ids[id], d.state[id] = cid, Running
		d.mu.Unlock()
	}
	d.cfg.Logf("docker: project %s, network %s, API on 127.0.0.1:%d-%d", d.cfg.Project, d.network(), d.cfg.FirstPort, d.cfg.FirstPort+2)
	return nil
}

func (d *Docker) cid(id string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.ids[id]
	if c == "" {
		return "", fmt.Errorf("unknown node %q", id)
	}
	return c, nil
}

func (d *Docker) docker(id, newState string, args ...string) error {
	c, err := d.cid(id)
	if err != nil {
		return err
	}
	if _, err := run(context.Background(), "", "docker", append(args, c)...); err != nil {
		return err
	}
	if newState != "" {
		d.mu.Lock()
		d.state[id] = newState
		d.mu.Unlock()
	}
	return nil
}

// State implements Backend.
func (d *Docker) State(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.state[id]; s != "" {
		return s
	}
	return Stopped
}

// Kill implements Backend.
func (d *Docker) Kill(id string) error { return d.docker(id, Killed, "kill", "-s", "KILL") }

// Wipe implements Backend: not here, the data is in a Compose volume that
// an image FROM scratch cannot empty (Supports refuses it first).
func (d *Docker) Wipe(id string) error {
	return fmt.Errorf("wipe %s: not supported by the docker backend (use the netns backend)", id)
}

// Terminate implements Backend.
func (d *Docker) Terminate(id string) error { return d.docker(id, Stopped, "stop", "-t", "40") }

// StartNode implements Backend.
func (d *Docker) StartNode(id string) error { return d.docker(id, Running, "start") }

// Pause implements Backend.
func (d *Docker) Pause(id string) error { return d.docker(id, Paused, "pause") }

// Resume implements Backend.
func (d *Docker) Resume(id string) error { return d.docker(id, Running, "unpause") }

// Partition implements Backend approximately: the largest group stays on
// the network and every node of the other groups is disconnected from it
// (so with three nodes, `partition X | rest` is exact; nodes left out of
// every group are treated as part of the largest one).
func (d *Docker) Partition(groups [][]string) error {
	largest := -1
	for i, g := range groups {
		nodes := slices.DeleteFunc(slices.Clone(g), func(s string) bool { return s == "client" })
		if largest < 0 || len(nodes) >= len(groups[largest]) {
			largest = i
		}
	}
	var errs []error
	for i, g := range groups {
		if i == largest {
			continue
		}
		for _, id := range g {
			if id == "client" {
				continue
			}
			if err := d.disconnect(id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (d *Docker) disconnect(id string) error {
	c, err := d.cid(id)
	if err != nil {
		return err
	}
	d.mu.Lock()
	already := d.disconnected[id]
	d.disconnected[id] = true
	d.mu.Unlock()
	if already {
		return nil
	}
	_, err = run(context.Background(), "", "docker", "network", "disconnect", "-f", d.network(), c)
	return err
}

// Cut implements Backend: not supported (Supports refuses it).
func (d *Docker) Cut([]string, []string) error {
	return errors.New("cut is not supported by the docker backend")
}

// Netem implements Backend: not supported.
func (d *Docker) Netem([]string, scenario.NetemParams) error {
	return errors.New("netem is not supported by the docker backend")
}

// Flap implements Backend: not supported.
func (d *Docker) Flap([]string, time.Duration) error {
	return errors.New("flap is not supported by the docker backend")
}

// Heal implements Backend: reconnect every disconnected container.
func (d *Docker) Heal() error {
	d.mu.Lock()
	var ids []string
	for id := range d.disconnected {
		ids = append(ids, id)
	}
	d.disconnected = map[string]bool{}
	d.mu.Unlock()
	var errs []error
	for _, id := range ids {
		c, err := d.cid(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := run(context.Background(), "", "docker", "network", "connect", "--alias", id, d.network(), c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Supports implements Backend.
func (d *Docker) Supports(ev scenario.Event) error {
	switch ev.Action {
	case scenario.Cut, scenario.Netem, scenario.Flap, scenario.Wipe:
		return fmt.Errorf("line %d: %s is not supported by the docker backend (use the netns backend)", ev.Line, ev.Action)
	case scenario.Partition:
		for _, g := range ev.Groups {
			for _, x := range g {
				if x == "client" {
					return fmt.Errorf("line %d: the docker backend cannot cut the workload off separately", ev.Line)
				}
			}
		}
	}
	return nil
}

// Close implements Backend: collect logs, then `down -v`.
func (d *Docker) Close() error {
	d.mu.Lock()
	started := d.started
	d.started = false
	d.mu.Unlock()
	if !started {
		return nil
	}
	if d.cfg.LogDir != "" {
		_ = os.MkdirAll(d.cfg.LogDir, 0o755)
		for _, id := range NodeIDs {
			if c, err := d.cid(id); err == nil {
				out, _ := exec.Command("docker", "logs", "-t", c).CombinedOutput()
				_ = os.WriteFile(d.LogPath(id), out, 0o644)
			}
		}
	}
	_, err := d.composeCmd(context.Background(), "down", "-v", "--remove-orphans")
	return err
}
