// Command fmgate is a resilient gateway for foundation-model chat
// applications. With no arguments it serves the MangaAssist profile on
// 127.0.0.1:8080 with the built-in model simulator.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fmgate:", err)
		os.Exit(1)
	}
}
