package nemesis

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/crownmq/crown/cmd/crown-chaos/scenario"
)

func TestDockerSupports(t *testing.T) {
	want := map[string]bool{ // scenario file -> accepted by the docker backend
		"isolate-leader": true, "isolate-follower": true, "majority-split": true, "kill-leader": true,
		"kill-follower": true, "stop-leader": true, "kill-all": true, "rolling-kill": true,
		"pause-leader": true, "isolate-then-kill": true,
		"bridge": false, "minority-client": false, "netem-flap": false, "lossy-leader": false,
		"wipe-stale-quorum": false,
	}
	files, _ := filepath.Glob("../../../scripts/chaos/scenarios/*.chaos")
	if len(files) != len(want) {
		t.Fatalf("%d scenario files, %d expected: update this table and docs/chaos.md", len(files), len(want))
	}
	d := NewDocker(DockerConfig{})
	for _, f := range files {
		s, err := scenario.ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for _, ev := range s.Events {
			if d.Supports(ev) != nil {
				ok = false
			}
		}
		name := strings.TrimSuffix(filepath.Base(f), ".chaos")
		if ok != want[name] {
			t.Errorf("%s: docker accepts it: %v, want %v", name, ok, want[name])
		}
	}
}
