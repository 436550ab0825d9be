// Command writeguard is the writeguard command-line tool.
//
// This is a placeholder until the real CLI lands: it prints usage and
// exits with status 2 for any command.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: writeguard <command> [arguments]

No commands are implemented yet.
`

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintf(os.Stderr, "writeguard: unknown command %q\n", os.Args[1])
	}

	fmt.Fprint(os.Stderr, usage)
	os.Exit(2)
}
