// Command chatbench measures what chatd adds to a streamed chat, against a bare relay, in one run.
//
// The mock and the relay are this program run again with the hidden "-serve mock" or "-serve relay",
// each in a process of its own, so that every RSS figure is one server's own.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		os.Exit(serveMain(os.Args[2:]))
	}
	fmt.Fprintln(os.Stderr, "usage: chatbench -serve mock|relay [flags]")
	os.Exit(2)
}
