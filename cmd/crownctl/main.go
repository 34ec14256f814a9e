// Command crownctl is Crown's command-line client: it talks to crownd over HTTP only.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "crownctl: no commands yet")
	os.Exit(2)
}
