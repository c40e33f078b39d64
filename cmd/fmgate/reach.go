package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/server"
)

// reachTimeout bounds the look at a sink's address.
const reachTimeout = time.Second

// sinkProblems names each event sink that has nowhere to send: an OTLP
// endpoint nothing listens at drops every batch sent there.
func sinkProblems(ctx context.Context, cfg config.Config) []string {
	ep := cfg.Events.Sinks.OTLP.Endpoint
	if ep == "" {
		return nil
	}
	addr := otlpAddr(ep)
	dctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return []string{fmt.Sprintf("events.sinks.otlp.endpoint: nothing answers at %s (%v): every span sent there would be dropped; start the collector or remove the sink", addr, err)}
	}
	c.Close()
	return nil
}

// otlpAddr is the host:port an OTLP endpoint (host:port or a URL) is sent
// to.
func otlpAddr(ep string) string {
	if !strings.Contains(ep, "://") {
		return ep
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" {
		return ep
	}
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// stateLine says where the instance keeps each piece of state, for the
// startup banner.
func stateLine(cfg config.Config) string {
	wal := cfg.Events.WAL.Dir
	keys, _ := server.KeyStore(cfg)
	if cfg.Fleet.Redis == "" {
		store := "no event store"
		if cfg.EventStore.Path != "" {
			store = "events in " + cfg.EventStore.Path
		}
		return fmt.Sprintf("mode: embedded — limits, quota, breakers, sessions and cache in this process's memory; %s; %s; write-ahead log %s", store, keys, orNone(wal))
	}
	views := "cost views off (no eventStore)"
	switch {
	case cfg.EventStore.Driver == "postgres":
		views = "cost views from PostgreSQL"
	case cfg.EventStore.Path != "":
		views = "cost views from " + cfg.EventStore.Path + " (this instance's spans only)"
	}
	events := "no NATS sink"
	if n := cfg.Events.Sinks.NATS; n.URL != "" {
		events = "spans to NATS " + n.URL
	}
	return fmt.Sprintf("mode: fleet — shared state in Redis %s (prefix %q); %s; %s; %s; write-ahead log %s",
		cfg.Fleet.Redis, cfg.Fleet.KeyPrefix, events, views, keys, orNone(wal))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
