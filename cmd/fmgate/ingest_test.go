package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/events/sinks"
	"github.com/fmgate/fmgate/internal/eventstore/pgstore"
	"github.com/fmgate/fmgate/internal/eventstore/storetest"
	"github.com/fmgate/fmgate/internal/pgtest"
)

// lockedBuffer is an io.Writer safe for the command's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestIngestCommandMovesSpansIntoPostgres(t *testing.T) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	stream, subject := "FMGATE_TEST_"+id, "fmgate.test."+id+".events"
	sink, err := sinks.NewNATS(context.Background(), events.NATSConfig{URL: "nats://127.0.0.1:4222", Subject: subject, Stream: stream}, nil)
	if err != nil {
		t.Fatalf("nats jetstream is not reachable: %v", err)
	}
	defer sink.Close()
	t.Cleanup(func() {
		if nc, err := nats.Connect("nats://127.0.0.1:4222"); err == nil {
			js, _ := jetstream.New(nc)
			_ = js.DeleteStream(context.Background(), stream)
			nc.Close()
		}
	})
	data := storetest.Dataset(21, 30)
	if err := sink.Write(context.Background(), data); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "fleet.yaml")
	os.WriteFile(cfgPath, []byte("events:\n  sinks:\n    nats: {url: \"nats://127.0.0.1:4222\", subject: "+subject+", stream: "+stream+"}\n"), 0o600)
	dsn := pgtest.DSN() + "&search_path=" + pgtest.Schema(t)

	ctx, stop := context.WithCancel(context.Background())
	var out lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"ingest", "-config", cfgPath, "-dsn", dsn, "-stats", "0"}, &out, io.Discard)
	}()

	store, err := pgstore.Open(context.Background(), dsn, pgstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := store.Stats(context.Background())
		if err == nil && st.Spans == int64(len(data)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not timing one
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := "stored " + strconv.Itoa(len(data)) + " spans"; !strings.Contains(out.String(), want) {
		t.Fatalf("output %q does not say %q", out.String(), want)
	}
}

// TestIngestFlagsOutOfRange: a batch or worker count out of range is
// refused before anything connects, naming the flag.
func TestIngestFlagsOutOfRange(t *testing.T) {
	for _, args := range [][]string{{"-batch", "0"}, {"-batch", "50001"}, {"-workers", "0"}, {"-workers", "-3"}} {
		err := run(context.Background(), append([]string{"ingest", "-nats", "nats://127.0.0.1:4222"}, args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("ingest %v: %v; want an error naming %s", args, err, args[0])
		}
	}
}
