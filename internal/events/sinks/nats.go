package sinks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fmgate/fmgate/internal/events"
)

// NATS publishes each batch as few JetStream messages on the configured
// subject, each packing many spans (events.AppendPacked, header
// events.SpansHeader naming how many), so that the stream, the ingesters'
// fetches and their acknowledgements handle one message for hundreds of
// spans. A message holds at most MaxPackedSpans spans and MaxPackedBytes
// (less when the server's max_payload is smaller); a span too large for a
// packed message alone goes as one plain message. Each message's
// Nats-Msg-Id is a digest of its spans' ids, so a batch re-sent as it was
// is dropped by the stream's duplicate window; the store keeps each span
// once whatever reaches it.
type NATS struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	subject  string
	maxBytes int
}

// Bounds of one packed message.
const (
	MaxPackedSpans = 1000
	MaxPackedBytes = 256 << 10
)

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
	return &NATS{nc: nc, js: js, subject: cfg.Subject, maxBytes: packedLimit(nc.MaxPayload())}, nil
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

// packedLimit is the most bytes of spans in one message: MaxPackedBytes,
// or less when the server's max_payload leaves less room beside the
// headers.
func packedLimit(maxPayload int64) int {
	const headroom = 512 // the headers: Nats-Msg-Id, events.SpansHeader
	return int(max(min(int64(MaxPackedBytes), maxPayload-headroom), 1))
}

// Write publishes the batch asynchronously and waits, within ctx, for every
// acknowledgement.
func (n *NATS) Write(ctx context.Context, batch []events.Event) error {
	msgs := pack(n.subject, batch, n.maxBytes)
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := n.js.PublishMsgAsync(m.msg, jetstream.WithMsgID(m.id))
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

// packedMsg is a message to publish and its Nats-Msg-Id.
type packedMsg struct {
	msg *nats.Msg
	id  string
}

// pack packs the batch, in order, into messages of at most MaxPackedSpans
// spans and limit bytes. A span larger than limit alone goes as a plain
// message (events.Encode, no events.SpansHeader), as earlier versions sent
// every span: the server then takes or refuses it as it did.
func pack(subject string, batch []events.Event, limit int) []packedMsg {
	var out []packedMsg
	var data []byte
	var count int
	h := sha256.New()
	flush := func() {
		if count == 0 {
			return
		}
		m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		m.Header.Set(events.SpansHeader, strconv.Itoa(count))
		out = append(out, packedMsg{msg: m, id: "spans-" + hex.EncodeToString(h.Sum(nil)[:16])})
		data, count = nil, 0
		h.Reset()
	}
	var enc []byte
	for i := range batch {
		e := &batch[i]
		enc = events.AppendJSON(enc[:0], e)
		size := events.PackedSize(len(enc))
		if size > limit {
			flush()
			out = append(out, packedMsg{msg: &nats.Msg{Subject: subject, Data: bytes.Clone(enc)}, id: e.ID()})
			continue
		}
		if count == MaxPackedSpans || len(data)+size > limit {
			flush()
		}
		if data == nil {
			data = make([]byte, 0, min(limit, size*(len(batch)-i)))
		}
		data = events.AppendPacked(data, enc)
		h.Write([]byte(e.ID()))
		count++
	}
	flush()
	return out
}

// Close drains the connection so in-flight publishes finish.
func (n *NATS) Close() error {
	if err := n.nc.Drain(); err != nil {
		return fmt.Errorf("sinks: nats: %w", err)
	}
	return nil
}
