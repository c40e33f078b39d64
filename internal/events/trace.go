package events

import (
	"context"
	"encoding/hex"
)

// TraceContext is the propagated part of a span: what a traceparent header
// carries.
type TraceContext struct {
	TraceID [16]byte // 32 hex in text; all zeros is invalid
	SpanID  [8]byte  // 16 hex in text; all zeros is invalid
	// Flags are the W3C trace flags; bit 0 is "sampled".
	Flags byte
}

// IsValid reports whether both ids are non-zero.
func (tc TraceContext) IsValid() bool {
	return tc.TraceID != [16]byte{} && tc.SpanID != [8]byte{}
}

// TraceHex returns the trace id as 32 lowercase hex.
func (tc TraceContext) TraceHex() string { return hex.EncodeToString(tc.TraceID[:]) }

// SpanHex returns the span id as 16 lowercase hex.
func (tc TraceContext) SpanHex() string { return hex.EncodeToString(tc.SpanID[:]) }

// ParseTraceparent parses a W3C traceparent header
// ("00-<32 hex>-<16 hex>-<2 hex>"). It follows the spec's rules: lowercase
// hex only, version ff and all-zero ids rejected, and a future version may
// append fields after a '-'. It reports false for anything else, in which
// case the caller starts a fresh trace.
func ParseTraceparent(h string) (TraceContext, bool) {
	const size = 55
	if len(h) < size || h[2] != '-' || h[35] != '-' || h[52] != '-' {
		return TraceContext{}, false
	}
	var ver [1]byte
	if !decodeLowerHex(ver[:], h[0:2]) || ver[0] == 0xff {
		return TraceContext{}, false
	}
	if ver[0] == 0 && len(h) != size {
		return TraceContext{}, false
	}
	if len(h) > size && h[size] != '-' {
		return TraceContext{}, false
	}
	var tc TraceContext
	var flags [1]byte
	if !decodeLowerHex(tc.TraceID[:], h[3:35]) ||
		!decodeLowerHex(tc.SpanID[:], h[36:52]) ||
		!decodeLowerHex(flags[:], h[53:55]) {
		return TraceContext{}, false
	}
	tc.Flags = flags[0]
	if !tc.IsValid() {
		return TraceContext{}, false
	}
	return tc, true
}

// FormatTraceparent returns the version-00 traceparent header for tc.
func FormatTraceparent(tc TraceContext) string {
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tc.TraceID[:])
	b[35] = '-'
	hex.Encode(b[36:52], tc.SpanID[:])
	b[52] = '-'
	b[53], b[54] = hexDigits[tc.Flags>>4], hexDigits[tc.Flags&0xf]
	return string(b[:])
}

func decodeLowerHex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := lowerHexVal(s[2*i])
		lo, ok2 := lowerHexVal(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func lowerHexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

type ctxKey struct{}

// Under ctxKey the context carries the current local span, as a *Span
// (stored as it is, so starting a span boxes nothing), or a remote parent
// taken from an incoming traceparent, as a remoteParent.
type remoteParent TraceContext

// fromContext returns the local span in ctx, or else the remote parent.
func fromContext(ctx context.Context) (*Span, TraceContext) {
	switch v := ctx.Value(ctxKey{}).(type) {
	case *Span:
		return v, TraceContext{}
	case remoteParent:
		return nil, TraceContext(v)
	}
	return nil, TraceContext{}
}

// ContextWithRemote returns ctx carrying tc as the parent of the next span
// started from it, so an incoming traceparent continues the caller's trace.
// An invalid tc leaves ctx unchanged.
func ContextWithRemote(ctx context.Context, tc TraceContext) context.Context {
	if !tc.IsValid() {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, remoteParent(tc))
}

// SpanFromContext returns the span started into ctx, or nil.
func SpanFromContext(ctx context.Context) *Span {
	s, _ := ctx.Value(ctxKey{}).(*Span)
	return s
}

// TraceContextFrom returns the trace context in ctx: the current span's, or
// the remote parent's. It reports false when ctx carries neither.
func TraceContextFrom(ctx context.Context) (TraceContext, bool) {
	span, remote := fromContext(ctx)
	if span != nil {
		return span.tc, true
	}
	return remote, remote.IsValid()
}

// TraceID returns the current trace id in ctx as 32 hex, or "".
func TraceID(ctx context.Context) string {
	if span, _ := fromContext(ctx); span != nil {
		return span.ev.TraceID // set at Start, never changed
	}
	tc, ok := TraceContextFrom(ctx)
	if !ok {
		return ""
	}
	return tc.TraceHex()
}

// SpanID returns the current span id in ctx as 16 hex, or "".
func SpanID(ctx context.Context) string {
	tc, ok := TraceContextFrom(ctx)
	if !ok {
		return ""
	}
	return tc.SpanHex()
}
