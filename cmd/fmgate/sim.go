package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// simulate is `fmgate sim`: the model simulator on the vendors' wire
// protocols, a stand-in upstream for fmgate's bedrock, anthropic and openai
// providers.
func simulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9090", "listen address")
	path := fs.String("config", "", "config file (YAML) whose models and sim.models to simulate; default: the MangaAssist profile")
	if err := fs.Parse(args); err != nil {
		return helpIsNoError(err)
	}
	if parseOnly(ctx) {
		return nil
	}
	cfg := config.Default()
	if *path != "" {
		var err error
		if cfg, err = config.Load(*path); err != nil {
			return err
		}
	}
	s, err := sim.New(cfg.SimConfig(), sim.Options{})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("sim: listen: %w", err)
	}
	srv := &http.Server{
		Handler:           simserver.Handler(s),
		ReadHeaderTimeout: 10 * time.Second,
		Protocols:         plainAndH2C(),
	}
	fmt.Fprintf(stdout, "fmgate sim serving %s on http://%s (OpenAI /v1/chat/completions, Anthropic /v1/messages, Bedrock /model/{id}/converse[-stream])\n",
		strings.Join(s.Models(), ", "), ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("sim: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("sim: shutdown: %w", err)
	}
	return nil
}

// plainAndH2C is HTTP/1.1 and unencrypted HTTP/2 (h2c) on one plain-TCP
// listener: AWS SDKs speak HTTP/2 by default.
func plainAndH2C() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}
