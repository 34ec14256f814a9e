//go:build linux

package nemesis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/crownmq/crown/cmd/internal/childproc"

	"github.com/crownmq/crown/cmd/crown-chaos/scenario"
	"github.com/crownmq/crown/cmd/crown-chaos/workload"
)

// Names of everything the netns backend creates. Nothing else is touched.
const (
	HubNS      = "crown-hub" // holds the bridge
	BridgeName = "crown-br0"
	HostVeth   = "crown-h0" // root-namespace end of the workload's link
	partChain  = "CROWN-PART"
	netemChain = "CROWN-NETEM"
	nfqQueue   = 1
	httpPort   = 6632
	raftPort   = 7632
)

// NodeNS is the namespace of node i (0-based): crown-n1..crown-n3.
func NodeNS(i int) string { return fmt.Sprintf("crown-n%d", i+1) }

// NetnsConfig configures the netns backend.
type NetnsConfig struct {
	Crownd    string   // crownd binary
	Self      string   // crown-chaos binary (runs nfq-delay inside a namespace)
	DataDir   string   // node data directories go under it
	LogDir    string   // node logs
	Subnet    string   // first three octets of the /24 (default 10.77.0)
	ExtraArgs []string // extra crownd flags
	Logf      Logf
}

// Netns runs three crownd processes in network namespaces crown-n1..3,
// joined by bridge crown-br0 inside namespace crown-hub; the root namespace
// reaches them through veth crown-h0 (<subnet>.1).
//
// The bridge lives in its own namespace, not in the root one, because the
// root namespace of a Docker host has br_netfilter enabled and a FORWARD
// policy of DROP: bridged traffic between the nodes would cross the host's
// firewall. Inside crown-hub it meets an empty ruleset.
type Netns struct {
	cfg   NetnsConfig
	procs []*proc

	mu        sync.Mutex
	created   bool
	blocked   map[[2]string]bool
	netemOK   int // 0 unknown, 1 tc netem works, -1 use the NFQUEUE delayer
	delayers  map[string]*exec.Cmd
	tcNetem   map[string]bool
	flaps     map[string]context.CancelFunc
	flapWG    sync.WaitGroup
	flapCount int
}

// NewNetns returns the backend; Start creates everything.
func NewNetns(cfg NetnsConfig) *Netns {
	if cfg.Subnet == "" {
		cfg.Subnet = "10.77.0"
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Netns{cfg: cfg, blocked: map[[2]string]bool{}, delayers: map[string]*exec.Cmd{},
		tcNetem: map[string]bool{}, flaps: map[string]context.CancelFunc{}}
}

// Name implements Backend.
func (n *Netns) Name() string { return "netns" }

func (n *Netns) ip(i int) string { return fmt.Sprintf("%s.%d", n.cfg.Subnet, 11+i) }

// ClientIP is the workload's address on the bridge.
func (n *Netns) ClientIP() string { return n.cfg.Subnet + ".1" }

func (n *Netns) endpointIP(id string) string {
	if id == "client" {
		return n.ClientIP()
	}
	return n.ip(index(id))
}

func index(id string) int { return slices.Index(NodeIDs, id) }

// Nodes implements Backend.
func (n *Netns) Nodes() []workload.Node {
	out := make([]workload.Node, len(NodeIDs))
	for i, id := range NodeIDs {
		out[i] = workload.Node{ID: id, URL: fmt.Sprintf("http://%s:%d", n.ip(i), httpPort)}
	}
	return out
}

// LogPath implements Backend.
func (n *Netns) LogPath(id string) string {
	return filepath.Join(n.cfg.LogDir, id+".log")
}

// Leftovers lists the crown-* namespaces and links of an earlier run that
// still exist.
func Leftovers() []string {
	var out []string
	if b, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && (f[0] == HubNS || slices.Contains([]string{NodeNS(0), NodeNS(1), NodeNS(2)}, f[0])) {
				out = append(out, "netns "+f[0])
			}
		}
	}
	if exec.Command("ip", "link", "show", HostVeth).Run() == nil {
		out = append(out, "link "+HostVeth)
	}
	return out
}

// Cleanup removes what an earlier run left behind: it kills the processes
// running inside the crown-n* and crown-hub namespaces (only this tool
// creates those), deletes the namespaces and the crown-h0 link.
func Cleanup(logf Logf) error {
	var errs []error
	for _, ns := range []string{NodeNS(0), NodeNS(1), NodeNS(2), HubNS} {
		if exec.Command("ip", "netns", "pids", ns).Run() != nil {
			continue // does not exist
		}
		b, _ := exec.Command("ip", "netns", "pids", ns).Output()
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				logf("killing pid %d in %s", pid, ns)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := run(context.Background(), "", "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		} else {
			logf("deleted netns %s", ns)
		}
	}
	if exec.Command("ip", "link", "show", HostVeth).Run() == nil {
		if _, err := run(context.Background(), "", "ip", "link", "del", HostVeth); err != nil {
			errs = append(errs, err)
		} else {
			logf("deleted link %s", HostVeth)
		}
	}
	return errors.Join(errs...)
}

// Start implements Backend: namespaces, bridge, veths, firewall chains,
// then the three nodes.
func (n *Netns) Start(ctx context.Context) error {
	for _, tool := range []string{"ip", "iptables", "iptables-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: install iproute2 and iptables (scripts/chaos/deps.sh)", tool)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("the netns backend needs root (network namespaces, iptables)")
	}
	if left := Leftovers(); len(left) > 0 {
		return fmt.Errorf("leftovers of an earlier run exist (%s): run `crown-chaos cleanup` first", strings.Join(left, ", "))
	}
	n.mu.Lock()
	n.created = true
	n.mu.Unlock()
	sh := func(args ...string) error {
		_, err := run(ctx, "", args[0], args[1:]...)
		return err
	}
	steps := [][]string{
		{"ip", "netns", "add", HubNS},
		{"ip", "-n", HubNS, "link", "set", "lo", "up"},
		{"ip", "-n", HubNS, "link", "add", BridgeName, "type", "bridge"},
		{"ip", "-n", HubNS, "link", "set", BridgeName, "up"},
		{"ip", "link", "add", HostVeth, "type", "veth", "peer", "name", "h0", "netns", HubNS},
		{"ip", "addr", "add", n.ClientIP() + "/24", "dev", HostVeth},
		{"ip", "link", "set", HostVeth, "up"},
		{"ip", "-n", HubNS, "link", "set", "h0", "master", BridgeName},
		{"ip", "-n", HubNS, "link", "set", "h0", "up"},
	}
	for i := range NodeIDs {
		ns, port := NodeNS(i), fmt.Sprintf("v%d", i+1)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", HubNS},
			[]string{"ip", "-n", ns, "addr", "add", n.ip(i) + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", HubNS, "link", "set", port, "master", BridgeName},
			[]string{"ip", "-n", HubNS, "link", "set", port, "up"},
		)
	}
	for _, s := range steps {
		if err := sh(s...); err != nil {
			return err
		}
	}
	for i := range NodeIDs {
		rules := fmt.Sprintf("*filter\n:%s - [0:0]\n:%s - [0:0]\n-A INPUT -j %s\n-A OUTPUT -j %s\n-A OUTPUT -j %s\nCOMMIT\n",
			partChain, netemChain, partChain, partChain, netemChain)
		if _, err := run(ctx, rules, "ip", "netns", "exec", NodeNS(i), "iptables-restore", "-w"); err != nil {
			return err
		}
	}
	n.cfg.Logf("network: bridge %s in netns %s, workload at %s (%s), nodes %s, %s, %s",
		BridgeName, HubNS, n.ClientIP(), HostVeth, n.ip(0), n.ip(1), n.ip(2))
	if err := os.MkdirAll(n.cfg.LogDir, 0o755); err != nil {
		return err
	}
	var peers []string
	for i, id := range NodeIDs {
		peers = append(peers, fmt.Sprintf("%s@%s:%d", id, n.ip(i), raftPort))
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CROWN_") && !strings.HasPrefix(kv, "QUEEN_") && !strings.HasPrefix(kv, "RETENTION_") {
			env = append(env, kv)
		}
	}
	for i, id := range NodeIDs {
		dir := filepath.Join(n.cfg.DataDir, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		argv := []string{"ip", "netns", "exec", NodeNS(i), n.cfg.Crownd,
			"--node-id", id, "--data-dir", dir,
			"--http-addr", fmt.Sprintf("%s:%d", n.ip(i), httpPort),
			"--http-advertise", fmt.Sprintf("http://%s:%d", n.ip(i), httpPort),
			"--raft-addr", fmt.Sprintf("%s:%d", n.ip(i), raftPort),
			"--peers", strings.Join(peers, ","), "--log-format", "text"}
		argv = append(argv, n.cfg.ExtraArgs...)
		p := &proc{id: id, argv: argv, env: env, logPath: n.LogPath(id)}
		n.procs = append(n.procs, p)
	}
	for _, p := range n.procs {
		if err := p.start(); err != nil {
			return err
		}
	}
	return nil
}

func (n *Netns) proc(id string) (*proc, error) {
	i := index(id)
	if i < 0 || i >= len(n.procs) {
		return nil, fmt.Errorf("unknown node %q", id)
	}
	return n.procs[i], nil
}

// State implements Backend.
func (n *Netns) State(id string) string {
	p, err := n.proc(id)
	if err != nil {
		return Stopped
	}
	return p.getState()
}

// Kill implements Backend.
func (n *Netns) Kill(id string) error {
	p, err := n.proc(id)
	if err != nil {
		return err
	}
	return p.kill()
}

// Wipe implements Backend.
func (n *Netns) Wipe(id string) error {
	p, err := n.proc(id) // an unknown id is an error, not a directory to delete
	if err != nil {
		return err
	}
	if st := p.getState(); st != Killed && st != Stopped {
		if err := p.kill(); err != nil {
			return err
		}
	}
	dir := filepath.Join(n.cfg.DataDir, id)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("wipe %s: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("wipe %s: %w", id, err)
	}
	return nil
}

// Terminate implements Backend.
func (n *Netns) Terminate(id string) error {
	p, err := n.proc(id)
	if err != nil {
		return err
	}
	return p.terminate()
}

// StartNode implements Backend.
func (n *Netns) StartNode(id string) error {
	p, err := n.proc(id)
	if err != nil {
		return err
	}
	return p.start()
}

// Pause implements Backend.
func (n *Netns) Pause(id string) error {
	p, err := n.proc(id)
	if err != nil {
		return err
	}
	return p.pause()
}

// Resume implements Backend.
func (n *Netns) Resume(id string) error {
	p, err := n.proc(id)
	if err != nil {
		return err
	}
	return p.resume()
}

// UnexpectedExits lists node processes that exited without a signal from
// the nemesis: crashes.
func (n *Netns) UnexpectedExits() []string {
	var out []string
	for _, p := range n.procs {
		out = append(out, p.unexpectedExits()...)
	}
	return out
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Partition implements Backend.
func (n *Netns) Partition(groups [][]string) error {
	n.mu.Lock()
	for i, g := range groups {
		for _, h := range groups[i+1:] {
			for _, a := range g {
				for _, b := range h {
					if a != b && !(a == "client" && b == "client") {
						n.blocked[pair(a, b)] = true
					}
				}
			}
		}
	}
	n.mu.Unlock()
	return n.applyRules()
}

// Cut implements Backend.
func (n *Netns) Cut(a, b []string) error {
	return n.Partition([][]string{a, b})
}

// applyRules rewrites each node's CROWN-PART chain from the blocked pairs
// (iptables-restore --noflush replaces the chain atomically).
func (n *Netns) applyRules() error {
	n.mu.Lock()
	rules := make([]strings.Builder, len(NodeIDs))
	for i := range rules {
		fmt.Fprintf(&rules[i], "*filter\n:%s - [0:0]\n", partChain)
	}
	for p := range n.blocked {
		for k, self := range p {
			other := p[1-k]
			if i := index(self); i >= 0 {
				ip := n.endpointIP(other)
				fmt.Fprintf(&rules[i], "-A %s -s %s/32 -j DROP\n-A %s -d %s/32 -j DROP\n", partChain, ip, partChain, ip)
			}
		}
	}
	n.mu.Unlock()
	var errs []error
	for i := range rules {
		rules[i].WriteString("COMMIT\n")
		if _, err := run(context.Background(), rules[i].String(), "ip", "netns", "exec", NodeNS(i),
			"iptables-restore", "-w", "--noflush"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// BlockedPairs describes the current partition rules (for logs).
func (n *Netns) BlockedPairs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for p := range n.blocked {
		out = append(out, p[0]+"-x-"+p[1])
	}
	slices.Sort(out)
	return out
}

// Netem implements Backend: tc netem on the node's eth0 when the kernel
// has it, else the NFQUEUE delayer (nfqueue_linux.go) on its OUTPUT.
func (n *Netns) Netem(ids []string, p scenario.NetemParams) error {
	var errs []error
	for _, id := range ids {
		if err := n.netemOne(id, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (n *Netns) netemOne(id string, p scenario.NetemParams) error {
	i := index(id)
	ns := NodeNS(i)
	n.mu.Lock()
	mode := n.netemOK
	n.mu.Unlock()
	if mode >= 0 {
		args := []string{"netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem"}
		if p.Delay > 0 {
			args = append(args, "delay", fmt.Sprintf("%dus", p.Delay.Microseconds()))
			if p.Jitter > 0 {
				args = append(args, fmt.Sprintf("%dus", p.Jitter.Microseconds()))
			}
		}
		if p.Loss > 0 {
			args = append(args, "loss", strconv.FormatFloat(p.Loss*100, 'f', 3, 64)+"%")
		}
		out, err := run(context.Background(), "", "ip", args...)
		if err == nil {
			n.mu.Lock()
			n.netemOK, n.tcNetem[id] = 1, true
			n.mu.Unlock()
			return nil
		}
		if !strings.Contains(out, "nknown") || mode == 1 {
			return err
		}
		n.cfg.Logf("tc netem is not available in this kernel; using the NFQUEUE delayer instead")
		n.mu.Lock()
		n.netemOK = -1
		n.mu.Unlock()
	}
	n.stopDelayer(id)
	cmd := exec.Command("ip", "netns", "exec", ns, n.cfg.Self, "nfq-delay",
		"--queue", strconv.Itoa(nfqQueue), "--delay", p.Delay.String(), "--jitter", p.Jitter.String(),
		"--loss", strconv.FormatFloat(p.Loss, 'f', 4, 64), "--seed", strconv.Itoa(i+1))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := childproc.Start(cmd); err != nil {
		return fmt.Errorf("start nfq-delay in %s: %w", ns, err)
	}
	ready := make(chan error, 1)
	go func() {
		br := bufio.NewReader(out)
		line, err := br.ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("nfq-delay said %q", line)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, br) // keep the pipe drained until the delayer exits
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("nfq-delay in %s: %w", ns, err)
		}
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("nfq-delay in %s did not start", ns)
	}
	n.mu.Lock()
	n.delayers[id] = cmd
	n.mu.Unlock()
	rules := fmt.Sprintf("*filter\n:%s - [0:0]\n-A %s -o eth0 -j NFQUEUE --queue-num %d --queue-bypass\nCOMMIT\n",
		netemChain, netemChain, nfqQueue)
	_, err = run(context.Background(), rules, "ip", "netns", "exec", ns, "iptables-restore", "-w", "--noflush")
	return err
}

func (n *Netns) stopDelayer(id string) {
	i := index(id)
	rules := fmt.Sprintf("*filter\n:%s - [0:0]\nCOMMIT\n", netemChain)
	_, _ = run(context.Background(), rules, "ip", "netns", "exec", NodeNS(i), "iptables-restore", "-w", "--noflush")
	n.mu.Lock()
	cmd := n.delayers[id]
	delete(n.delayers, id)
	n.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// Flap implements Backend: the node's bridge port goes down for half of
// each period and up for the other half, until Heal.
func (n *Netns) Flap(ids []string, period time.Duration) error {
	if period <= 0 {
		period = time.Second
	}
	for _, id := range ids {
		i := index(id)
		port := fmt.Sprintf("v%d", i+1)
		n.mu.Lock()
		if c := n.flaps[id]; c != nil {
			c()
		}
		ctx, cancel := context.WithCancel(context.Background())
		n.flaps[id] = cancel
		n.flapWG.Add(1)
		n.mu.Unlock()
		go func() {
			defer n.flapWG.Done()
			set := func(state string) {
				_, _ = run(context.Background(), "", "ip", "-n", HubNS, "link", "set", port, state)
			}
			defer set("up")
			for {
				set("down")
				select {
				case <-ctx.Done():
					return
				case <-time.After(period / 2):
				}
				set("up")
				n.mu.Lock()
				n.flapCount++
				n.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-time.After(period - period/2):
				}
			}
		}()
	}
	return nil
}

// Heal implements Backend.
func (n *Netns) Heal() error {
	n.mu.Lock()
	for id, c := range n.flaps {
		c()
		delete(n.flaps, id)
	}
	n.blocked = map[[2]string]bool{}
	var delayed, tc []string
	for id := range n.delayers {
		delayed = append(delayed, id)
	}
	for id := range n.tcNetem {
		tc = append(tc, id)
	}
	n.tcNetem = map[string]bool{}
	n.mu.Unlock()
	n.flapWG.Wait()
	var errs []error
	if err := n.applyRules(); err != nil {
		errs = append(errs, err)
	}
	for _, id := range delayed {
		n.stopDelayer(id)
	}
	for _, id := range tc {
		if _, err := run(context.Background(), "", "ip", "netns", "exec", NodeNS(index(id)), "tc", "qdisc", "del", "dev", "eth0", "root"); err != nil {
			errs = append(errs, err)
		}
	}
	// Links a flap might have left down.
	for i := range NodeIDs {
		if _, err := run(context.Background(), "", "ip", "-n", HubNS, "link", "set", fmt.Sprintf("v%d", i+1), "up"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Supports implements Backend: everything.
func (n *Netns) Supports(scenario.Event) error { return nil }

// Close implements Backend: kills the nodes and the delayers, deletes the
// namespaces (which removes the veths and the bridge) and crown-h0.
func (n *Netns) Close() error {
	n.mu.Lock()
	created := n.created
	n.created = false
	for id, c := range n.flaps {
		c()
		delete(n.flaps, id)
	}
	var delayed []string
	for id := range n.delayers {
		delayed = append(delayed, id)
	}
	n.mu.Unlock()
	n.flapWG.Wait()
	for _, id := range delayed {
		n.stopDelayer(id)
	}
	for _, p := range n.procs {
		p.forceKill()
	}
	if !created {
		return nil
	}
	var errs []error
	for i := range NodeIDs {
		if _, err := run(context.Background(), "", "ip", "netns", "del", NodeNS(i)); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	if _, err := run(context.Background(), "", "ip", "netns", "del", HubNS); err != nil && !strings.Contains(err.Error(), "No such file") {
		errs = append(errs, err)
	}
	if exec.Command("ip", "link", "show", HostVeth).Run() == nil {
		if _, err := run(context.Background(), "", "ip", "link", "del", HostVeth); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
