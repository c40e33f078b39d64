package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/server"
	"github.com/fmgate/fmgate/internal/tlscert"
	"github.com/redis/go-redis/v9"
)

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file (YAML); default: the embedded MangaAssist profile")
	addr := fs.String("addr", "", "listen address (overrides server.addr; default 127.0.0.1:8080)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
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
	// The flags override the file, at start and on every reload.
	override := func(c *config.Config) {
		if *addr != "" {
			c.Server.Addr = *addr
		}
	}
	override(&cfg)
	if err := cfg.CheckSecrets(); err != nil {
		return err
	}
	mem, err := setMemory(cfg.Server, os.Getenv, os.ReadFile)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	// JSON logs; a line written during a turn carries its trace_id and span_id.
	log := slog.New(events.NewLogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})))
	redis.SetLogger(redisLogger{log})
	log.Info("memory", "gc_percent", mem.GCPercent, "gc_percent_from", mem.GCFrom,
		"heap_limit_mib", mem.Limit>>20, "heap_limit_from", mem.LimitFrom, "cgroup_limit_mib", mem.CgroupLimit>>20)

	token, generated := adminToken(cfg)
	app, err := server.New(ctx, cfg, server.Options{Log: log, ConfigPath: *path, Override: override})
	if err != nil {
		return err
	}
	defer app.Close()

	ln, err := net.Listen("tcp", cfg.Server.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           app.Handler(token),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		Protocols:         plainAndH2C(),
	}
	scheme, serveOn := "http", srv.Serve
	if t := cfg.Server.TLS; t.Enabled() {
		if err := serveTLS(srv, t, log); err != nil {
			ln.Close()
			return err
		}
		scheme = "https"
		serveOn = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	fmt.Fprintf(stdout, "fmgate %s serving %s on %s://%s (models: %s)\n", buildVersion(), cfg.Profile, scheme, ln.Addr(), modelList(cfg))
	fmt.Fprintln(stdout, stateLine(cfg))
	for _, p := range sinkProblems(ctx, cfg) {
		log.Warn(p) // the collector may come up later: a warning, not a refusal
	}
	if generated {
		fmt.Fprintf(stdout, "admin token (generated for this run; set FMGATE_ADMIN_TOKEN to choose one): %s\n", token)
	}
	errc := make(chan error, 1)
	go func() { errc <- serveOn(ln) }()
	go reloadOnHangup(ctx, app)

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	// Drain: /readyz turns false, new turns are refused, in-flight ones finish.
	log.Info("draining", "timeout", cfg.Server.DrainTimeout.String())
	dctx, cancel := context.WithTimeout(context.Background(), cfg.Server.DrainTimeout)
	defer cancel()
	if err := app.Gateway.Drain(dctx); err != nil {
		log.Warn("drain timeout reached with turns still in flight")
	}
	app.Gateway.CloseConnections()
	sctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("shutdown", "err", err)
	}
	log.Info("stopped")
	return nil
}

// serveTLS sets srv up to serve TLS from t's files (read again when they
// change) with HTTP/2 and HTTP/1.1, and with a client CA, to guard /admin/
// and /dashboard with client certificates.
func serveTLS(srv *http.Server, t config.TLS, log *slog.Logger) error {
	files := tlscert.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile}
	certs, err := tlscert.New(files, log)
	if err != nil {
		return err
	}
	tc, err := tlscert.ServerConfig(files, certs)
	if err != nil {
		return err
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	srv.Protocols, srv.TLSConfig = &p, tc
	if t.ClientCAFile != "" {
		srv.Handler = tlscert.RequireClientCert(srv.Handler, "/admin/", "/dashboard")
	}
	return nil
}

// reloadOnHangup reloads the config file on SIGHUP, as POST /admin/reload
// does; Reload logs the outcome, and a refused reload keeps the config in
// force.
func reloadOnHangup(ctx context.Context, app *server.Server) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		_, _ = app.Reload(ctx, "SIGHUP")
	}
}

// adminToken picks the admin token: config, then FMGATE_ADMIN_TOKEN, else a
// random one (reported as generated so it is printed once).
func adminToken(cfg config.Config) (string, bool) {
	if v := os.Getenv("FMGATE_ADMIN_TOKEN"); v != "" {
		return v, false
	}
	if cfg.Server.AdminToken != "" {
		return cfg.Server.AdminToken, false
	}
	var b [18]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]), true
}

func modelList(cfg config.Config) string {
	s := ""
	for i, m := range cfg.Models {
		if i > 0 {
			s += " → "
		}
		s += m.Name
	}
	return s
}

// redisLogger puts the Redis client's own messages (a failed dial, a pool
// in trouble) in the JSON log as warnings, instead of unstructured lines
// on stderr.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}
