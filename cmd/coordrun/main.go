// Command coordrun is a ZooKeeper-compatible coordination service on raft
// (coordrun server) and a supervisor that runs a job on exactly one host
// at a time.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := exitStatus(newRootCommand().ExecuteContext(ctx))
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordrun:", err)
	}
	os.Exit(code)
}

// exitAbort ends the server at once on SIGABRT (abort.go): the member may
// be hung, so nothing waits for it to shut down.
func exitAbort() { os.Exit(128 + int(syscall.SIGABRT)) }
