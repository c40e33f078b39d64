package payloadlog

import (
	"bufio"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Log is the payload log over a Store: it seals each payload with
// AES-256-GCM before the store sees it, bound to the row's columns (a
// payload moved to another row, or a row whose user or time was changed,
// does not open), and opens it when read.
type Log struct {
	store Store
	aead  cipher.AEAD
}

// sealVersion opens every sealed payload: the format (nonce, then the
// ciphertext and its tag) may change with it.
const sealVersion = 1

// New returns the log over store, sealing under key (32 bytes).
func New(store Store, key []byte) (*Log, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("payloadlog: the sealing key must be 32 bytes, not %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("payloadlog: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("payloadlog: %w", err)
	}
	return &Log{store: store, aead: aead}, nil
}

// Store is the store under the log.
func (l *Log) Store() Store { return l.store }

// aad binds a sealed payload to its row.
func aad(traceID string, at time.Time, user, key, feature string) []byte {
	b := []byte("fmgate payload v1\x00")
	b = append(b, traceID...)
	b = append(b, 0)
	b = strconv.AppendInt(b, at.UnixMicro(), 10)
	for _, s := range [...]string{user, key, feature} {
		b = append(b, 0)
		b = append(b, s...)
	}
	return b
}

// seal turns a record into its row.
func (l *Log) seal(r Record) (Row, error) {
	plain, err := json.Marshal(r.Payload)
	if err != nil {
		return Row{}, fmt.Errorf("payloadlog: %w", err)
	}
	at := r.At.UTC().Truncate(time.Microsecond)
	out := make([]byte, 1+l.aead.NonceSize(), 1+l.aead.NonceSize()+len(plain)+l.aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return Row{}, fmt.Errorf("payloadlog: nonce: %w", err)
	}
	out = l.aead.Seal(out, out[1:], plain, aad(r.TraceID, at, r.UserHash, r.KeyID, r.Feature))
	return Row{TraceID: r.TraceID, At: at, UserHash: r.UserHash, KeyID: r.KeyID, Feature: r.Feature, Sealed: out}, nil
}

// ErrSealed is matched by the error of a payload that does not open: it
// was sealed under another key, or its row was altered.
var ErrSealed = errors.New("payload does not open: sealed under another key, or its row was altered")

// open turns a row back into its record.
func (l *Log) open(r Row) (Record, error) {
	n := l.aead.NonceSize()
	if len(r.Sealed) < 1+n || r.Sealed[0] != sealVersion {
		return Record{}, fmt.Errorf("payloadlog: trace %s: %w", r.TraceID, ErrSealed)
	}
	plain, err := l.aead.Open(nil, r.Sealed[1:1+n], r.Sealed[1+n:], aad(r.TraceID, r.At, r.UserHash, r.KeyID, r.Feature))
	if err != nil {
		return Record{}, fmt.Errorf("payloadlog: trace %s: %w", r.TraceID, ErrSealed)
	}
	rec := Record{TraceID: r.TraceID, At: r.At, UserHash: r.UserHash, KeyID: r.KeyID, Feature: r.Feature}
	if err := json.Unmarshal(plain, &rec.Payload); err != nil {
		return Record{}, fmt.Errorf("payloadlog: trace %s: the payload does not decode: %w", r.TraceID, err)
	}
	return rec, nil
}

// Put seals and stores records in one batch.
func (l *Log) Put(ctx context.Context, recs []Record) error {
	rows := make([]Row, 0, len(recs))
	for _, r := range recs {
		row, err := l.seal(r)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	return l.store.Put(ctx, rows)
}

// Get returns the payload of a turn.
func (l *Log) Get(ctx context.Context, traceID string) (Record, bool, error) {
	row, ok, err := l.store.Get(ctx, traceID)
	if err != nil || !ok {
		return Record{}, false, err
	}
	rec, err := l.open(row)
	return rec, err == nil, err
}

// Scan calls fn with each record f selects, in time order.
func (l *Log) Scan(ctx context.Context, f Filter, fn func(Record) error) error {
	return l.store.Scan(ctx, f, func(row Row) error {
		rec, err := l.open(row)
		if err != nil {
			return err
		}
		return fn(rec)
	})
}

// Export writes the records f selects to w as JSON lines (one Record a
// line, in time order) and returns how many it wrote.
func (l *Log) Export(ctx context.Context, f Filter, w io.Writer) (int, error) {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	err := l.Scan(ctx, f, func(r Record) error {
		if err := enc.Encode(r); err != nil {
			return err
		}
		n++
		return nil
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return n, err
}

// Forget deletes every payload of a user.
func (l *Log) Forget(ctx context.Context, userHash string) (int64, error) {
	if userHash == "" {
		return 0, errors.New("payloadlog: forget: no user")
	}
	return l.store.DeleteUser(ctx, userHash)
}

// Prune deletes the payloads of turns before before: PruneBatch rows at a
// time, at most ten times, so that one run holds the store briefly; what
// is left goes at the next run.
func (l *Log) Prune(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for range pruneRounds {
		n, err := l.store.DeleteBefore(ctx, before, PruneBatch)
		total += n
		if err != nil || n < PruneBatch {
			return total, err
		}
	}
	return total, nil
}

// ReadRecords reads a JSON-lines export back, calling fn for each record;
// blank lines are skipped, and a line that is not a record stops it with
// an error naming the line.
func ReadRecords(r io.Reader, fn func(Record) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("line %d: not a payload record: %w", line, err)
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	return sc.Err()
}
