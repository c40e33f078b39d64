package events

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// SpansHeader is the message header of a packed batch of spans: its value
// is the number of spans the message holds, and its presence names the
// packing (AppendPacked). A message without it holds one encoded span.
const SpansHeader = "Fmgate-Spans"

// AppendPacked appends one record of a packed batch to b: the length of
// enc, a span encoded by AppendJSON, as a uvarint, then enc.
func AppendPacked(b, enc []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(enc)))
	return append(b, enc...)
}

// PackedSize is the size AppendPacked adds for a record of n encoded bytes.
func PackedSize(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n)) + n
}

// ErrPacked reports a packed batch that does not decode: its records do
// not fill it exactly, or their number is not the one its header names.
var ErrPacked = errors.New("events: malformed packed batch")

// maxPackedGrow is the most spans DecodePacked makes room for before
// decoding them (what the NATS sink packs at most).
const maxPackedGrow = 1000

// DecodePacked appends the want spans packed in b (AppendPacked) to dst.
// It fails, appending nothing, when b does not hold exactly want records
// or one of them does not decode.
func DecodePacked(dst []Event, b []byte, want int) ([]Event, error) {
	if want < 1 || want > len(b) {
		return dst, fmt.Errorf("%w: %d spans in %d bytes", ErrPacked, want, len(b))
	}
	n := len(dst)
	// Room for the spans up front, as far as a sink packs them: a header
	// naming more only grows dst as its records decode.
	dst = slices.Grow(dst, min(want, maxPackedGrow))
	var syms symbols
	for i := 0; i < want; i++ {
		size, w := binary.Uvarint(b)
		if w <= 0 || size > uint64(len(b)-w) {
			return dst[:n], fmt.Errorf("%w: record %d of %d truncated", ErrPacked, i+1, want)
		}
		dst = append(dst, Event{})
		if rec := b[w : w+int(size)]; !decodeCanonicalSyms(rec, &dst[len(dst)-1], &syms) {
			e, err := Decode(rec)
			if err != nil {
				return dst[:n], fmt.Errorf("%w: record %d of %d: %w", ErrPacked, i+1, want, err)
			}
			dst[len(dst)-1] = e
		}
		b = b[w+int(size):]
	}
	if len(b) != 0 {
		return dst[:n], fmt.Errorf("%w: %d bytes after %d records", ErrPacked, len(b), want)
	}
	return dst, nil
}
