package eventstore

import (
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// A stored span is one compact binary record rather than a column per
// field: binding and storing 35 columns per span costs several times the
// whole ingest budget, and every query that needs a span's fields reads
// all of them anyway. ts_start is kept beside the record (it is the index
// key) and not repeated inside.
//
// Layout, version 1: a version byte, a flags uvarint, then the fields in
// schema order. Strings are a uvarint n followed by the bytes: n>>1 is the
// string's length, and n&1 says the string was even-length lowercase hex,
// stored as raw bytes (half the length): trace, span and user ids are.
// The prompt cache's figures (tokens read, tokens written, money saved)
// follow the cost only when flagCache is set, so that the many spans
// without them stay as short as before and records written before they
// existed read as they were.
const codecVersion = 1

// codecTally marks a tally: what is left of a span of a turn that was not
// sampled (events.Event.SampledOut) once its details are dropped. It keeps
// exactly the fields the views sum, group and filter on, so that every
// figure stays the one of the whole span; the trace view does not show it.
//
// Layout: the byte 2, then trace id, user id hash, session id, duration,
// name, graph version, model id, prompt version, tool id, tokens in and
// out, cost, status, fallback used, a flag byte (tallyEval: an eval score
// follows; tallyCache: the prompt cache's figures follow) [eval score]
// [cache tokens read and written, money saved], feature, surface, locale
// and user tier, in the forms of a span record. Tallies written before the
// cache's figures existed have 0 or 1 in the flag byte, and read without
// them.
const codecTally = 2

// Bits of a tally's flag byte.
const (
	tallyEval  = 1
	tallyCache = 2
)

const (
	flagMustPersist = 1 << iota
	flagEval
	flagWorkflowIsTrace
	flagNoEnd
	flagNoStart
	flagSampledOut
	flagCache // the prompt cache's figures follow the cost
)

var errCorrupt = errors.New("eventstore: corrupt span record")

// encodeSpan appends e's record to b.
func encodeSpan(b []byte, e *events.Event) []byte {
	var flags uint64
	if e.MustPersist {
		flags |= flagMustPersist
	}
	if e.Outcome.EvalScore != nil {
		flags |= flagEval
	}
	if e.WorkflowID == e.TraceID {
		flags |= flagWorkflowIsTrace
	}
	if e.TSEnd.IsZero() {
		flags |= flagNoEnd
	}
	if e.TSStart.IsZero() {
		flags |= flagNoStart
	}
	if e.SampledOut {
		flags |= flagSampledOut
	}
	if hasCache(&e.Resource) {
		flags |= flagCache
	}
	b = append(b, codecVersion)
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendVarint(b, int64(e.SchemaVersion))
	b = appendStr(b, e.TraceID)
	b = appendStr(b, e.SpanID)
	b = appendStr(b, e.ParentSpanID)
	if flags&flagWorkflowIsTrace == 0 {
		b = appendStr(b, e.WorkflowID)
	}
	b = appendStr(b, e.UserIDHash)
	b = appendStr(b, e.SessionID)
	if flags&flagNoEnd == 0 {
		b = binary.AppendVarint(b, e.TSEnd.UnixMilli()-unixMilli(e.TSStart))
	}
	b = binary.AppendVarint(b, e.DurationMS)
	b = appendStr(b, e.Name)
	b = appendStr(b, e.PromptExcerpt)
	b = appendStr(b, e.Node.GraphVersion)
	b = appendStr(b, e.Node.NodeID)
	b = appendStr(b, string(e.Node.InvocationMode))
	a := &e.Artifact
	b = appendStr(b, string(a.ArtifactKind))
	b = appendStr(b, a.ModelID)
	b = appendStr(b, a.PromptVersion)
	b = appendStr(b, a.ToolID)
	b = appendStr(b, a.ToolVersion)
	b = appendStr(b, a.SubAgentID)
	b = appendStr(b, a.SubAgentVersion)
	r := &e.Resource
	b = binary.AppendVarint(b, int64(r.TokensIn))
	b = binary.AppendVarint(b, int64(r.TokensOut))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(finite(r.CostUSD)))
	if flags&flagCache != 0 {
		b = appendCache(b, r)
	}
	b = appendStr(b, string(r.CacheHit))
	b = binary.AppendUvarint(b, uint64(len(r.CapabilityFlagsActive)))
	for _, f := range r.CapabilityFlagsActive {
		b = appendStr(b, f)
	}
	o := &e.Outcome
	b = appendStr(b, string(o.Status))
	b = appendStr(b, o.ErrorCode)
	b = appendStr(b, o.FallbackUsed)
	if o.EvalScore != nil {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(*o.EvalScore))
	}
	at := &e.Attribution
	b = appendStr(b, at.Feature)
	b = appendStr(b, at.Surface)
	b = appendStr(b, at.Locale)
	b = appendStr(b, at.UserTier)
	return appendStr(b, at.Priority)
}

// encodeTally appends the tally of e (see codecTally) to b.
func encodeTally(b []byte, e *events.Event) []byte {
	b = append(b, codecTally)
	b = appendStr(b, e.TraceID)
	b = appendStr(b, e.UserIDHash)
	b = appendStr(b, e.SessionID)
	b = binary.AppendVarint(b, e.DurationMS)
	b = appendStr(b, e.Name)
	b = appendStr(b, e.Node.GraphVersion)
	a := &e.Artifact
	b = appendStr(b, a.ModelID)
	b = appendStr(b, a.PromptVersion)
	b = appendStr(b, a.ToolID)
	r := &e.Resource
	b = binary.AppendVarint(b, int64(r.TokensIn))
	b = binary.AppendVarint(b, int64(r.TokensOut))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(finite(r.CostUSD)))
	o := &e.Outcome
	b = appendStr(b, string(o.Status))
	b = appendStr(b, o.FallbackUsed)
	var flags byte
	if o.EvalScore != nil {
		flags |= tallyEval
	}
	cache := hasCache(r)
	if cache {
		flags |= tallyCache
	}
	b = append(b, flags)
	if o.EvalScore != nil {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(*o.EvalScore))
	}
	if cache {
		b = appendCache(b, r)
	}
	at := &e.Attribution
	b = appendStr(b, at.Feature)
	b = appendStr(b, at.Surface)
	b = appendStr(b, at.Locale)
	return appendStr(b, at.UserTier)
}

// hasCache reports whether r carries figures of the prompt cache.
func hasCache(r *events.Resource) bool {
	return r.TokensCacheRead != 0 || r.TokensCacheWrite != 0 || finite(r.CacheSavedUSD) != 0
}

// appendCache appends the prompt cache's figures of r.
func appendCache(b []byte, r *events.Resource) []byte {
	b = binary.AppendVarint(b, int64(r.TokensCacheRead))
	b = binary.AppendVarint(b, int64(r.TokensCacheWrite))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(finite(r.CacheSavedUSD)))
}

// isTally reports whether a stored record is a tally.
func isTally(rec []byte) bool { return len(rec) > 0 && rec[0] == codecTally }

// droppable reports whether a span of a turn that was not sampled is
// reduced to its tally: every span but the turn span and the must-persist
// (cost and quota) records.
func droppable(e *events.Event) bool { return e.Name != "turn" && !e.MustPersist }

func appendStr(b []byte, s string) []byte {
	if len(s) > 0 && len(s)%2 == 0 && isHex(s) {
		b = binary.AppendUvarint(b, uint64(len(s))<<1|1)
		for i := 0; i < len(s); i += 2 {
			b = append(b, unhex(s[i])<<4|unhex(s[i+1]))
		}
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(s))<<1)
	return append(b, s...)
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// spanDecoder reads span records. It interns short strings, which repeat
// across spans (names, versions, features, locales…), so that decoding many
// spans allocates little. The zero value is ready to use; it is not safe
// for concurrent use.
type spanDecoder struct {
	b       []byte
	err     bool
	strs    map[string]string
	scratch []byte
	// skipIDs leaves the ids (trace, span, parent, workflow, user,
	// session) and the prompt excerpt empty: aggregations need none, and
	// they are most of a record's allocations.
	skipIDs bool
	// skipTallies is read by spansDec: tallies are not visited.
	skipTallies bool
}

// decode parses one record stored with ts_start tsStart (milliseconds).
func (d *spanDecoder) decode(rec []byte, tsStart int64, e *events.Event) error {
	*e = events.Event{}
	d.b, d.err = rec, false
	if isTally(d.b) {
		return d.decodeTally(tsStart, e)
	}
	if len(d.b) == 0 || d.b[0] != codecVersion {
		return errCorrupt
	}
	d.b = d.b[1:]
	flags := d.uvarint()
	e.SchemaVersion = int(d.varint())
	e.TraceID = d.id()
	e.SpanID = d.id()
	e.ParentSpanID = d.id()
	if flags&flagWorkflowIsTrace != 0 {
		e.WorkflowID = e.TraceID
	} else {
		e.WorkflowID = d.id()
	}
	e.UserIDHash = d.id()
	e.SessionID = d.id()
	if flags&flagNoStart == 0 {
		e.TSStart = time.UnixMilli(tsStart).UTC()
	}
	if flags&flagNoEnd == 0 {
		e.TSEnd = time.UnixMilli(tsStart + d.varint()).UTC()
	}
	e.DurationMS = d.varint()
	e.Name = d.str(true)
	e.PromptExcerpt = d.id()
	e.Node.GraphVersion = d.str(true)
	e.Node.NodeID = d.str(true)
	e.Node.InvocationMode = events.InvocationMode(d.str(true))
	a := &e.Artifact
	a.ArtifactKind = events.ArtifactKind(d.str(true))
	a.ModelID = d.str(true)
	a.PromptVersion = d.str(true)
	a.ToolID = d.str(true)
	a.ToolVersion = d.str(true)
	a.SubAgentID = d.str(true)
	a.SubAgentVersion = d.str(true)
	r := &e.Resource
	r.TokensIn = int(d.varint())
	r.TokensOut = int(d.varint())
	r.CostUSD = d.float()
	if flags&flagCache != 0 {
		d.cache(r)
	}
	r.CacheHit = events.CacheHit(d.str(true))
	if n := d.uvarint(); n > 0 && !d.err {
		if n > uint64(len(d.b)) {
			return errCorrupt
		}
		r.CapabilityFlagsActive = make([]string, n)
		for i := range r.CapabilityFlagsActive {
			r.CapabilityFlagsActive[i] = d.str(true)
		}
	}
	o := &e.Outcome
	o.Status = events.Status(d.str(true))
	o.ErrorCode = d.str(true)
	o.FallbackUsed = d.str(true)
	if flags&flagEval != 0 {
		v := d.float()
		o.EvalScore = &v
	}
	at := &e.Attribution
	at.Feature = d.str(true)
	at.Surface = d.str(true)
	at.Locale = d.str(true)
	at.UserTier = d.str(true)
	at.Priority = d.str(true)
	if d.err || len(d.b) != 0 {
		return errCorrupt
	}
	e.MustPersist = flags&flagMustPersist != 0
	e.SampledOut = flags&flagSampledOut != 0
	return nil
}

// decodeTally parses a tally (d.b) into e: the span's figures, without
// its span id and the other details.
func (d *spanDecoder) decodeTally(tsStart int64, e *events.Event) error {
	d.b = d.b[1:]
	e.SchemaVersion = events.SchemaVersion
	e.TraceID = d.id()
	e.WorkflowID = e.TraceID
	e.UserIDHash = d.id()
	e.SessionID = d.id()
	e.TSStart = time.UnixMilli(tsStart).UTC()
	e.DurationMS = d.varint()
	e.TSEnd = e.TSStart.Add(time.Duration(e.DurationMS) * time.Millisecond)
	e.Name = d.str(true)
	e.Node.GraphVersion = d.str(true)
	a := &e.Artifact
	a.ModelID = d.str(true)
	a.PromptVersion = d.str(true)
	a.ToolID = d.str(true)
	r := &e.Resource
	r.TokensIn = int(d.varint())
	r.TokensOut = int(d.varint())
	r.CostUSD = d.float()
	o := &e.Outcome
	o.Status = events.Status(d.str(true))
	o.FallbackUsed = d.str(true)
	if len(d.b) == 0 || d.b[0]&^(tallyEval|tallyCache) != 0 {
		return errCorrupt
	}
	flags := d.b[0]
	d.b = d.b[1:]
	if flags&tallyEval != 0 {
		v := d.float()
		o.EvalScore = &v
	}
	if flags&tallyCache != 0 {
		d.cache(r)
	}
	at := &e.Attribution
	at.Feature = d.str(true)
	at.Surface = d.str(true)
	at.Locale = d.str(true)
	at.UserTier = d.str(true)
	if d.err || len(d.b) != 0 {
		return errCorrupt
	}
	return nil
}

// cache reads the prompt cache's figures into r.
func (d *spanDecoder) cache(r *events.Resource) {
	r.TokensCacheRead = int(d.varint())
	r.TokensCacheWrite = int(d.varint())
	r.CacheSavedUSD = d.float()
}

func (d *spanDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *spanDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *spanDecoder) float() float64 {
	if len(d.b) < 8 {
		d.err, d.b = true, nil
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

// id reads a string that is not interned, or skips it (skipIDs).
func (d *spanDecoder) id() string {
	if !d.skipIDs {
		return d.str(false)
	}
	n := d.uvarint()
	raw := n >> 1
	if n&1 == 1 {
		raw /= 2
	}
	if d.err || raw > uint64(len(d.b)) {
		d.err, d.b = true, nil
		return ""
	}
	d.b = d.b[raw:]
	return ""
}

// maxInterned bounds the interned strings of one decoder.
const maxInterned = 4096

const hexLower = "0123456789abcdef"

// str reads a string; intern says it is usually one of few values.
func (d *spanDecoder) str(intern bool) string {
	n := d.uvarint()
	hexed := n&1 == 1
	n >>= 1
	raw := n
	if hexed {
		raw = n / 2
	}
	if d.err || raw > uint64(len(d.b)) || (hexed && n%2 != 0) {
		d.err, d.b = true, nil
		return ""
	}
	if n == 0 {
		return ""
	}
	var bs []byte
	if hexed {
		d.scratch = d.scratch[:0]
		for _, c := range d.b[:raw] {
			d.scratch = append(d.scratch, hexLower[c>>4], hexLower[c&15])
		}
		bs = d.scratch
	} else {
		bs = d.b[:raw]
	}
	d.b = d.b[raw:]
	if !intern || len(bs) > 64 {
		return string(bs)
	}
	if s, ok := d.strs[string(bs)]; ok {
		return s
	}
	s := string(bs)
	if d.strs == nil {
		d.strs = make(map[string]string)
	}
	if len(d.strs) < maxInterned {
		d.strs[s] = s
	}
	return s
}

// codecPack marks a packed row: the turn span of a turn that was not
// sampled, with the tallies of its other spans that reached the store in
// the same write, stored as one row under the turn span's key. Inserting a
// row and its index entry is most of what storing a span costs, and an
// unsampled turn's spans are read only as figures, so one row a turn
// instead of one a span is most of what storing a turn costs.
//
// Layout: the byte 3, the number of records, then for each the difference
// of its start from the row's ts_start (ms, signed), its length and the
// record (a span's or a tally's). The turn span comes first: the row's key
// is its key, so a replayed turn span is taken for the row it is in.
const codecPack = 3

// isPack reports whether a stored row is a packed row.
func isPack(rec []byte) bool { return len(rec) > 0 && rec[0] == codecPack }

// eachRecord calls fn with every record the stored row data holds, each
// with its start: one, or each of a packed row's.
func eachRecord(data []byte, ts int64, fn func(rec []byte, ts int64) error) error {
	if !isPack(data) {
		return fn(data, ts)
	}
	b := data[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return errCorrupt
	}
	b = b[k:]
	for range n {
		delta, k := binary.Varint(b)
		if k <= 0 {
			return errCorrupt
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return errCorrupt
		}
		rec := b[k : k+int(size)]
		b = b[k+int(size):]
		if isPack(rec) {
			return errCorrupt
		}
		if err := fn(rec, ts+delta); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return errCorrupt
	}
	return nil
}

// packer builds a packed row (codecPack).
type packer struct {
	b  []byte
	ts int64
}

// begin starts a packed row of n records, stored with start ts, at the end
// of b.
func (p *packer) begin(b []byte, ts int64, n int) {
	p.b, p.ts = append(b, codecPack), ts
	p.b = binary.AppendUvarint(p.b, uint64(n))
}

// add appends a record of a span that started at ts.
func (p *packer) add(rec []byte, ts int64) {
	p.b = binary.AppendVarint(p.b, ts-p.ts)
	p.b = binary.AppendUvarint(p.b, uint64(len(rec)))
	p.b = append(p.b, rec...)
}

// rewriteRecords rewrites the records of a stored row with fn, which
// returns a record's new form and whether it changed; it returns the row's
// new data and whether any record changed.
func rewriteRecords(data []byte, ts int64, fn func(rec []byte, ts int64) ([]byte, bool, error)) ([]byte, bool, error) {
	if !isPack(data) {
		return fn(data, ts)
	}
	type part struct {
		rec []byte
		ts  int64
	}
	var parts []part
	changed := false
	err := eachRecord(data, ts, func(rec []byte, at int64) error {
		out, ok, err := fn(rec, at)
		if err != nil {
			return err
		}
		changed = changed || ok
		parts = append(parts, part{out, at})
		return nil
	})
	if err != nil || !changed {
		return data, false, err
	}
	var p packer
	p.begin(nil, ts, len(parts))
	for _, pt := range parts {
		p.add(pt.rec, pt.ts)
	}
	return p.b, true, nil
}
