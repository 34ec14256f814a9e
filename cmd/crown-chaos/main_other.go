//go:build !linux

// Command crown-chaos needs Linux (network namespaces, iptables, signals to
// processes in other namespaces); see DESIGN.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "crown-chaos runs on Linux only")
	os.Exit(3)
}
