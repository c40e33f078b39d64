package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fmgate/fmgate/internal/events"
)

// NATS publishes each event as one JetStream message on the configured
// subject, with Nats-Msg-Id set to Event.ID so the stream's duplicate window
// drops re-sent events.
type NATS struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
}

// NewNATS connects to cfg.URL and creates cfg.Stream (capturing cfg.Subject)
// if it does not exist. An existing stream is used as it is.
func NewNATS(ctx context.Context, cfg events.NATSConfig, log *slog.Logger) (*NATS, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nc, err := nats.Connect(cfg.URL,
		nats.Name("fmgate-events"),
		nats.Timeout(2*time.Second),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("events: nats disconnected", "err", err)
			}
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("sinks: nats: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("sinks: nats: %w", err)
	}
	if _, err := js.Stream(ctx, cfg.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:       cfg.Stream,
			Subjects:   []string{cfg.Subject},
			Storage:    jetstream.FileStorage,
			Duplicates: 2 * time.Minute,
			MaxAge:     cfg.MaxAge,
			MaxBytes:   orUnlimited(cfg.MaxBytes),
			Discard:    jetstream.DiscardOld,
		})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			nc.Close()
			return nil, fmt.Errorf("sinks: nats: create stream %s: %w", cfg.Stream, err)
		}
	} else if err != nil {
		nc.Close()
		return nil, fmt.Errorf("sinks: nats: stream %s: %w", cfg.Stream, err)
	}
	return &NATS{nc: nc, js: js, subject: cfg.Subject}, nil
}

// orUnlimited maps 0 to JetStream's "no limit".
func orUnlimited(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// Name is "nats".
func (n *NATS) Name() string { return "nats" }

// Write publishes the batch asynchronously and waits, within ctx, for every
// acknowledgement.
func (n *NATS) Write(ctx context.Context, batch []events.Event) error {
	futures := make([]jetstream.PubAckFuture, 0, len(batch))
	for i := range batch {
		msg := &nats.Msg{Subject: n.subject, Data: events.Encode(&batch[i])}
		f, err := n.js.PublishMsgAsync(msg, jetstream.WithMsgID(batch[i].ID()))
		if err != nil {
			return fmt.Errorf("sinks: nats: publish: %w", err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("sinks: nats: publish: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("sinks: nats: %w", ctx.Err())
		}
	}
	return nil
}

// Close drains the connection so in-flight publishes finish.
func (n *NATS) Close() error {
	if err := n.nc.Drain(); err != nil {
		return fmt.Errorf("sinks: nats: %w", err)
	}
	return nil
}
