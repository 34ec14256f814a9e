package testcluster

import (
	"os"
	"strings"
)

// startMarker begins the harness's line before every start of a node (see
// Node.start); what follows it is that process's output.
const startMarker = "==== testcluster: start #"

// CurrentLog returns the output of the node's latest process (everything
// after the last start marker of its log file): what the running process
// has logged so far, or what the last one logged before it exited.
func (n *Node) CurrentLog() (string, error) {
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		return "", err
	}
	s := string(b)
	if i := strings.LastIndex(s, startMarker); i >= 0 {
		s = s[i:]
	}
	return s, nil
}
