package eventstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// Materialization. Write commits the spans and nothing else; their
// contributions to the roll-ups, turns and turn versions are summed in
// memory (pending) and written in one transaction when enough have
// gathered, when a reader needs them (sync) or at Close, together with the
// id of the last span they cover (the watermark). A crash loses only the
// in-memory sums: Open re-reads the spans above the watermark. Summing in
// memory first means a roll-up row is written once per materialization
// instead of once per batch, which is most of the ingest rate.

// pending holds the contributions of the spans with ids in (watermark,
// lastID].
type pending struct {
	spans  int
	lastID int64
	coarse map[bucketKey]*agg // coarse minute buckets
	fine   map[bucketKey]*agg // fine ten-minute buckets
	turns  map[int64]*turnState
}

type bucketKey struct {
	bucket int64 // bucket start, ms
	dims   int64
}

func newPending() *pending {
	return &pending{coarse: map[bucketKey]*agg{}, fine: map[bucketKey]*agg{}, turns: map[int64]*turnState{}}
}

// addPending sums one stored span; th is hashID(e.TraceID).
func (s *Store) addPending(p *pending, e *events.Event, ts, th int64) {
	p.spans++
	coarse, fine := s.dict.spanDims(e)
	for _, k := range [2]struct {
		m     map[bucketKey]*agg
		width int64
		dims  int64
	}{{p.coarse, minuteMS, coarse}, {p.fine, 10 * minuteMS, fine}} {
		bk := bucketKey{floorTo(ts, k.width), k.dims}
		a := k.m[bk]
		if a == nil {
			a = &agg{}
			k.m[bk] = a
		}
		a.addSpan(e, ts)
	}
	t := p.turns[th]
	if t == nil {
		t = &turnState{th: th, trace: e.TraceID}
		p.turns[th] = t
	}
	t.addSpan(s, e, ts)
}

// turnState is a turn's row: everything known about one trace.
type turnState struct {
	th                              int64
	trace                           string
	ts, last                        int64 // earliest and latest span start
	root                            string
	user, session, feature, surface string
	locale, tier, graph             string
	sums                            agg // over all spans; sums.turns counts root spans
	duration                        int64
	status                          string
	eval                            *float64
	vers                            []verSums // sorted by vid
	vseq                            int64     // where its version entries are (versionturns.go)
}

// verSums are the sums over a turn's spans that carried one version.
type verSums struct {
	vid int64
	agg
}

func (t *turnState) hasRoot() bool { return t.root != "" }

func maxStr(a, b string) string {
	if b > a {
		return b
	}
	return a
}

func (t *turnState) addSpan(s *Store, e *events.Event, ts int64) {
	if t.sums.spans == 0 || ts < t.ts {
		t.ts = ts
	}
	if t.sums.spans == 0 || ts > t.last {
		t.last = ts
	}
	t.sums.addSpan(e, ts)
	t.user = maxStr(t.user, e.UserIDHash)
	t.session = maxStr(t.session, e.SessionID)
	t.feature = maxStr(t.feature, e.Attribution.Feature)
	t.surface = maxStr(t.surface, e.Attribution.Surface)
	t.locale = maxStr(t.locale, e.Attribution.Locale)
	t.tier = maxStr(t.tier, e.Attribution.UserTier)
	t.graph = maxStr(t.graph, e.Node.GraphVersion)
	if e.Name == "turn" {
		// The root span ends last and describes the whole turn.
		t.root = maxStr(t.root, e.SpanID)
		t.duration = max(t.duration, e.DurationMS)
		t.status = maxStr(t.status, string(e.Outcome.Status))
		if e.Outcome.EvalScore != nil {
			v := *e.Outcome.EvalScore
			t.eval = &v
		}
	}
	for _, v := range [4]verKey{{dimGraph, e.Node.GraphVersion}, {dimPrompt, e.Artifact.PromptVersion},
		{dimModel, e.Artifact.ModelID}, {dimTool, e.Artifact.ToolID}} {
		if v.version == "" {
			continue
		}
		t.verSums(s.dict.writerVerID(v)).addSpan(e, ts)
	}
}

// verSums returns the sums of vid, adding them if needed.
func (t *turnState) verSums(vid int64) *agg {
	i := 0
	for i < len(t.vers) && t.vers[i].vid < vid {
		i++
	}
	if i == len(t.vers) || t.vers[i].vid != vid {
		t.vers = append(t.vers, verSums{})
		copy(t.vers[i+1:], t.vers[i:])
		t.vers[i] = verSums{vid: vid}
	}
	return &t.vers[i].agg
}

// merge adds o (a later part of the same trace) to t.
func (t *turnState) merge(o *turnState) {
	if o.sums.spans == 0 {
		return
	}
	if t.sums.spans == 0 || o.ts < t.ts {
		t.ts = o.ts
	}
	if t.sums.spans == 0 || o.last > t.last {
		t.last = o.last
	}
	t.sums.merge(&o.sums)
	t.root = maxStr(t.root, o.root)
	t.user = maxStr(t.user, o.user)
	t.session = maxStr(t.session, o.session)
	t.feature = maxStr(t.feature, o.feature)
	t.surface = maxStr(t.surface, o.surface)
	t.locale = maxStr(t.locale, o.locale)
	t.tier = maxStr(t.tier, o.tier)
	t.graph = maxStr(t.graph, o.graph)
	t.duration = max(t.duration, o.duration)
	t.status = maxStr(t.status, o.status)
	if o.eval != nil {
		t.eval = o.eval
	}
	for i := range o.vers {
		t.verSums(o.vers[i].vid).merge(&o.vers[i].agg)
	}
}

func (t *turnState) minute() int64 { return floorTo(t.ts, minuteMS) / minuteMS }

// Turn rows in SQL: turnCols of turnFrom, in scanTurnState's order.
const (
	turnCols = `t.minute, t.th, t.ts_start, t.user_id_hash, t.feature, t.cost_usd, t.has_root, t.spans,
	t.tokens_in, t.tokens_out, t.errors, t.fallbacks, t.latency_ms, t.graph_version, i.trace_id,
	i.root_span_id, i.session_id, i.surface, i.locale, i.user_tier, i.duration_ms, i.status, i.eval_score,
	i.last_ts, i.vers, i.vseq`
	turnFrom = `turns t JOIN turn_info i ON i.minute = t.minute AND i.th = t.th`
)

// hotArgs and infoArgs are the turn's turns and turn_info rows.
func (t *turnState) hotArgs(args []any) []any {
	return append(args, t.minute(), t.th, t.ts, t.user, t.feature, t.graph, t.sums.cost, t.hasRoot(),
		t.sums.spans, t.sums.tokensIn, t.sums.tokensOut, t.sums.errors, t.sums.fallbacks, t.sums.latency)
}

func (t *turnState) infoArgs(args []any) []any {
	var eval any
	if t.eval != nil {
		eval = *t.eval
	}
	return append(args, t.minute(), t.th, t.trace, t.root, t.session, t.surface, t.locale, t.tier,
		t.duration, t.status, eval, t.last, t.encodeVers(), t.vseq)
}

type scanner interface{ Scan(...any) error }

func scanTurnState(rs scanner) (*turnState, error) {
	var (
		t       turnState
		minute  int64
		hasRoot bool
		eval    sql.NullFloat64
		vers    []byte
	)
	if err := rs.Scan(&minute, &t.th, &t.ts, &t.user, &t.feature, &t.sums.cost, &hasRoot, &t.sums.spans,
		&t.sums.tokensIn, &t.sums.tokensOut, &t.sums.errors, &t.sums.fallbacks, &t.sums.latency, &t.graph,
		&t.trace, &t.root, &t.session, &t.surface, &t.locale, &t.tier, &t.duration, &t.status, &eval,
		&t.last, &vers, &t.vseq); err != nil {
		return nil, err
	}
	if eval.Valid {
		t.eval = &eval.Float64
	}
	t.sums.first, t.sums.last = t.ts, t.last
	var err error
	if t.vers, err = decodeVers(vers); err != nil {
		return nil, err
	}
	// Turns counts root spans; a stored turn has at most one.
	if hasRoot {
		t.sums.turns = 1
	}
	return &t, nil
}

// encodeVers writes the per-version sums.
func (t *turnState) encodeVers() []byte {
	b := make([]byte, 0, 16*len(t.vers))
	for i := range t.vers {
		v := &t.vers[i]
		b = binary.AppendUvarint(b, uint64(v.vid))
		b = appendAgg(b, &v.agg)
	}
	return b
}

func appendAgg(b []byte, a *agg) []byte {
	for _, n := range [...]int64{a.spans, a.turns, a.tokensIn, a.tokensOut, a.errors, a.fallbacks, a.latency} {
		b = binary.AppendVarint(b, n)
	}
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(a.cost))
}

func readAgg(b []byte, a *agg) ([]byte, bool) {
	for _, p := range [...]*int64{&a.spans, &a.turns, &a.tokensIn, &a.tokensOut, &a.errors, &a.fallbacks, &a.latency} {
		v, n := binary.Varint(b)
		if n <= 0 {
			return nil, false
		}
		*p, b = v, b[n:]
	}
	if len(b) < 8 {
		return nil, false
	}
	a.cost = math.Float64frombits(binary.LittleEndian.Uint64(b))
	return b[8:], true
}

func decodeVers(b []byte) ([]verSums, error) {
	var out []verSums
	for len(b) > 0 {
		vid, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errCorrupt
		}
		v := verSums{vid: int64(vid)}
		var ok bool
		if b, ok = readAgg(b[n:], &v.agg); !ok {
			return nil, errCorrupt
		}
		out = append(out, v)
	}
	return out, nil
}

// turnVersion is a turn_versions row: a turn seen through one version it
// carried.
type turnVersion struct {
	ts, th int64
	turnFigures
	spans agg // sums of the spans that carried the version
	// The turn's attribution, pointing into the record read: valid until
	// the next one.
	user, feature, graph []byte
}

// turnFigures are what a version comparison reads of a turn; they lead
// the turn_versions record so that it can read them alone.
type turnFigures struct {
	hasRoot  bool    // the turn's root span is stored
	outcome  byte    // the root span's status: outcomeFailed, outcomeFallback or 0
	duration int64   // the turn's duration
	cost     float64 // the whole turn's cost
	eval     float64
	hasEval  bool
}

const (
	outcomeFailed   = 1
	outcomeFallback = 2
)

func outcomeOf(status string) byte {
	switch events.Status(status) {
	case events.StatusFailed:
		return outcomeFailed
	case events.StatusFallback:
		return outcomeFallback
	}
	return 0
}

// appendVersionRow appends the turn_versions record of t for one version.
func (t *turnState) appendVersionRow(b []byte, v *verSums) []byte {
	var flags byte
	if t.hasRoot() {
		flags |= 1
	}
	if t.eval != nil {
		flags |= 2
	}
	b = append(b, flags, outcomeOf(t.status))
	b = binary.AppendVarint(b, t.duration)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(t.sums.cost))
	if t.eval != nil {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(*t.eval))
	}
	b = appendAgg(b, &v.agg)
	for _, s := range [...]string{t.user, t.feature, t.graph} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// decodeFigures reads the leading figures of a turn_versions record and
// returns the rest.
func decodeFigures(b []byte, f *turnFigures) ([]byte, error) {
	if len(b) < 2 {
		return nil, errCorrupt
	}
	flags := b[0]
	f.hasRoot, f.hasEval, f.outcome = flags&1 != 0, flags&2 != 0, b[1]
	b = b[2:]
	var n int
	if f.duration, n = binary.Varint(b); n <= 0 {
		return nil, errCorrupt
	}
	b = b[n:]
	if len(b) < 8 {
		return nil, errCorrupt
	}
	f.cost = math.Float64frombits(binary.LittleEndian.Uint64(b))
	b = b[8:]
	f.eval = 0
	if f.hasEval {
		if len(b) < 8 {
			return nil, errCorrupt
		}
		f.eval = math.Float64frombits(binary.LittleEndian.Uint64(b))
		b = b[8:]
	}
	return b, nil
}

func decodeTurnVersion(b []byte, tv *turnVersion) error {
	b, err := decodeFigures(b, &tv.turnFigures)
	if err != nil {
		return err
	}
	var ok bool
	if b, ok = readAgg(b, &tv.spans); !ok {
		return errCorrupt
	}
	for _, p := range [...]*[]byte{&tv.user, &tv.feature, &tv.graph} {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return errCorrupt
		}
		*p, b = b[n:n+int(l)], b[n+int(l):]
	}
	if len(b) != 0 {
		return errCorrupt
	}
	return nil
}

// flushDue says the pending sums should be written now.
func (s *Store) flushDue() bool {
	p := s.pend
	return p.spans >= s.cfg.MaterializeSpans ||
		(p.spans > 0 && s.now().Sub(s.pendSince) >= s.cfg.MaterializeInterval)
}

// sync writes the pending sums, so that a reader sees every span written
// so far. It rebuilds the in-memory state first if an earlier
// materialization failed.
func (s *Store) sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncLocked(ctx)
}

func (s *Store) syncLocked(ctx context.Context) error {
	if s.closed {
		return errClosed
	}
	if err := s.recoverLocked(ctx); err != nil {
		return err
	}
	if s.pend.spans == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("eventstore: materialize: %w", err)
	}
	s.pace.start()
	if err := s.flushTx(ctx, tx); err != nil {
		tx.Rollback()
		s.stale = true
		return err
	}
	if err := tx.Commit(); err != nil {
		s.stale = true
		return fmt.Errorf("eventstore: materialize: %w", err)
	}
	s.flushed()
	return nil
}

var errClosed = errors.New("eventstore: closed")

// flushed resets the pending sums after their transaction committed.
func (s *Store) flushed() {
	s.wm = s.pend.lastID
	s.pend = newPending()
	dims, vers := s.dict.sizes()
	s.dict.saved(dims, vers)
	s.evictKnown()
}

// recoverLocked rebuilds the in-memory state from the database when it is
// stale: after Open, or after a failed materialization whose transaction
// rolled back.
func (s *Store) recoverLocked(ctx context.Context) error {
	if !s.stale {
		return nil
	}
	if err := s.dict.load(ctx, s.w); err != nil {
		return err
	}
	var pruned int64
	if err := s.w.QueryRowContext(ctx, `SELECT (SELECT value FROM meta WHERE key = 'materialized'),
		(SELECT value FROM meta WHERE key = 'pruned_before'), (SELECT COALESCE(MAX(id), 0) FROM events)`).Scan(&s.wm, &pruned, &s.lastID); err != nil {
		return fmt.Errorf("eventstore: recover: %w", err)
	}
	s.pruned.Store(pruned)
	if err := s.loadKnown(ctx); err != nil {
		return err
	}
	s.pend = newPending()
	s.pend.lastID = s.wm
	s.pendSince = s.now()
	// Sum the spans stored after the last materialization.
	rs, err := s.w.QueryContext(ctx, `SELECT id, ts_start, data FROM events WHERE id > ? ORDER BY id`, s.wm)
	if err != nil {
		return fmt.Errorf("eventstore: recover: %w", err)
	}
	var (
		dec spanDecoder
		e   events.Event
	)
	for rs.Next() {
		var (
			id, ts int64
			data   []byte
		)
		if err := rs.Scan(&id, &ts, &data); err != nil {
			rs.Close()
			return fmt.Errorf("eventstore: recover: %w", err)
		}
		err := eachRecord(data, ts, func(rec []byte, ts int64) error {
			if err := dec.decode(rec, ts, &e); err != nil {
				return err
			}
			s.addPending(s.pend, &e, ts, hashID(e.TraceID))
			s.maxTS = max(s.maxTS, ts)
			return nil
		})
		if err != nil {
			rs.Close()
			return fmt.Errorf("eventstore: recover: span %d: %w", id, err)
		}
		s.pend.lastID = id
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("eventstore: recover: %w", err)
	}
	s.pend.lastID = max(s.pend.lastID, s.lastID)
	s.stale = false
	return nil
}

// The known map lists the turns started in the last two TurnWindows of
// event time (th → minute), so that a span of a turn already stored finds
// its row without a search. A span starting more than a TurnWindow before
// the latest span seen is looked up in the database instead.

func (s *Store) knownFloor() int64 { return s.maxTS - 2*s.cfg.TurnWindow.Milliseconds() }

func (s *Store) loadKnown(ctx context.Context) error {
	s.known = map[int64]int64{}
	var maxMinute sql.NullInt64
	if err := s.w.QueryRowContext(ctx, `SELECT MAX(minute) FROM turns`).Scan(&maxMinute); err != nil {
		return fmt.Errorf("eventstore: recover: %w", err)
	}
	if !maxMinute.Valid {
		return nil
	}
	var last int64
	if err := s.w.QueryRowContext(ctx, `SELECT MAX(last_ts) FROM turn_info WHERE minute = ?`, maxMinute.Int64).Scan(&last); err != nil {
		return fmt.Errorf("eventstore: recover: %w", err)
	}
	s.maxTS = max(s.maxTS, last)
	s.knownLo = floorTo(s.knownFloor(), minuteMS) / minuteMS
	rs, err := s.w.QueryContext(ctx, `SELECT th, minute FROM turns WHERE minute >= ?`, s.knownLo)
	if err != nil {
		return fmt.Errorf("eventstore: recover: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var th, minute int64
		if err := rs.Scan(&th, &minute); err != nil {
			return fmt.Errorf("eventstore: recover: %w", err)
		}
		s.known[th] = minute
	}
	return rs.Err()
}

// evictKnown forgets turns older than the known window, at most once per
// half window.
func (s *Store) evictKnown() {
	lo := floorTo(s.knownFloor(), minuteMS) / minuteMS
	if lo-s.knownLo < s.cfg.TurnWindow.Milliseconds()/minuteMS/2+1 {
		return
	}
	for th, m := range s.known {
		if m < lo {
			delete(s.known, th)
		}
	}
	s.knownLo = lo
}

// flushTx writes the pending sums in tx.
func (s *Store) flushTx(ctx context.Context, tx *sql.Tx) error {
	if err := s.dict.save(ctx, tx); err != nil {
		return err
	}
	if err := s.flushRollups(ctx, tx); err != nil {
		return err
	}
	if err := s.flushTurns(ctx, tx); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'materialized'`, s.pend.lastID); err != nil {
		return fmt.Errorf("eventstore: materialize: %w", err)
	}
	return nil
}

func rollupSQL(rows int) string {
	one := "(" + strings.Repeat("?,", rollupCols-1) + "?)"
	return `INSERT INTO rollup (lvl, bucket, dims, spans, turns, tokens_in, tokens_out, cost_usd, errors, fallbacks,
		latency_ms, first_ts, last_ts, cache_read, cache_write, cache_saved_usd)
		VALUES ` + strings.Repeat(one+",", rows-1) + one + ` ON CONFLICT DO UPDATE SET
		spans = spans + excluded.spans, turns = turns + excluded.turns,
		tokens_in = tokens_in + excluded.tokens_in, tokens_out = tokens_out + excluded.tokens_out,
		cost_usd = cost_usd + excluded.cost_usd, errors = errors + excluded.errors,
		fallbacks = fallbacks + excluded.fallbacks, latency_ms = latency_ms + excluded.latency_ms,
		first_ts = MIN(first_ts, excluded.first_ts), last_ts = MAX(last_ts, excluded.last_ts),
		cache_read = cache_read + excluded.cache_read, cache_write = cache_write + excluded.cache_write,
		cache_saved_usd = cache_saved_usd + excluded.cache_saved_usd`
}

type levelKey struct {
	lvl int
	bucketKey
}

func (s *Store) flushRollups(ctx context.Context, tx *sql.Tx) error {
	all := map[levelKey]*agg{}
	for _, src := range []struct {
		m      map[bucketKey]*agg
		levels []level
	}{{s.pend.coarse, coarseLevels}, {s.pend.fine, fineLevels}} {
		for k, a := range src.m {
			for _, l := range src.levels {
				lk := levelKey{l.id, bucketKey{floorTo(k.bucket, l.width), k.dims}}
				if l.width == minuteMS || (l.fine && l.width == 10*minuteMS) {
					all[lk] = a // the pending bucket itself
					continue
				}
				t := all[lk]
				if t == nil {
					t = &agg{}
					all[lk] = t
				}
				t.merge(a)
			}
		}
	}
	// In key order: each statement then writes neighbouring rows.
	keys := make([]levelKey, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b levelKey) int {
		return cmp.Or(cmp.Compare(a.lvl, b.lvl), cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.dims, b.dims))
	})
	w := newMultiExec(tx, s.upsertRollup, rollupCols)
	for _, k := range keys {
		a := all[k]
		if err := w.add(ctx, k.lvl, k.bucket, k.dims, a.spans, a.turns, a.tokensIn, a.tokensOut, a.cost,
			a.errors, a.fallbacks, a.latency, a.first, a.last, a.cacheRead, a.cacheWrite, a.cacheSaved); err != nil {
			return fmt.Errorf("eventstore: materialize roll-up: %w", err)
		}
	}
	if err := w.flush(ctx); err != nil {
		return fmt.Errorf("eventstore: materialize roll-up: %w", err)
	}
	return nil
}

// ladder is one insert statement prepared for several row counts,
// largest first, the last for one row: n rows run as the fewest
// statements.
type ladder struct {
	sizes []int
	stmts []*sql.Stmt
	pace  *pacer
}

func prepareLadder(ctx context.Context, db *sql.DB, pace *pacer, sqlFor func(rows int) string, sizes ...int) (*ladder, error) {
	l := &ladder{sizes: sizes, pace: pace}
	for _, n := range sizes {
		st, err := db.PrepareContext(ctx, sqlFor(n))
		if err != nil {
			l.close()
			return nil, fmt.Errorf("eventstore: prepare: %w", err)
		}
		l.stmts = append(l.stmts, st)
	}
	return l, nil
}

func (l *ladder) close() error {
	if l == nil {
		return nil
	}
	var errs []error
	for _, st := range l.stmts {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// pacer parks the writer between the statements of a long write. A
// materialization is milliseconds of CPU that never blocks; on a busy core
// the scheduler, which looks for sockets that became ready only when it has
// nothing else to run (or every 10 ms), would hold every answer that
// arrived meanwhile until the write ended. A pause gives it that moment
// (runtime.Gosched would not: the writer stays runnable). A pause costs the
// writer a millisecond when nothing else waits (the poller's resolution),
// so it comes only after pauseEvery of a write's running: a write of a few
// statements never pauses, and bulk ingest loses a fraction of its pace.
type pacer struct {
	now   func() time.Time // nil: time.Now
	since time.Time        // the write's start or its last pause; guarded by Store.mu
}

const (
	pauseEvery     = 2 * time.Millisecond
	statementPause = 100 * time.Microsecond
)

func (p *pacer) clock() time.Time {
	if p.now == nil {
		return time.Now()
	}
	return p.now()
}

// start notes that a write begins: the writer has just waited for it.
func (p *pacer) start() { p.since = p.clock() }

// statement is called after each statement of a write.
func (p *pacer) statement() {
	if p.clock().Sub(p.since) < pauseEvery {
		return
	}
	time.Sleep(statementPause)
	p.since = p.clock()
}

// largest is the most rows one statement takes.
func (l *ladder) largest() int { return l.sizes[0] }

// exec runs the rows in args (cols values each) in tx, calling done, if
// not nil, after each statement with its result and the rows it took.
func (l *ladder) exec(ctx context.Context, tx *sql.Tx, cols int, args []any, done func(res sql.Result, from, n int) error) error {
	row := 0
	for len(args) > 0 {
		i := 0
		for l.sizes[i]*cols > len(args) {
			i++
		}
		n := l.sizes[i]
		res, err := tx.StmtContext(ctx, l.stmts[i]).ExecContext(ctx, args[:n*cols]...)
		if err != nil {
			return err
		}
		l.pace.statement()
		if done != nil {
			if err := done(res, row, n); err != nil {
				return err
			}
		}
		args, row = args[n*cols:], row+n
	}
	return nil
}

// multiExec gathers rows and runs them through a ladder, the largest
// statement as soon as it is full, the rest at flush.
type multiExec struct {
	l    *ladder
	tx   *sql.Tx
	cols int
	args []any
}

func newMultiExec(tx *sql.Tx, l *ladder, cols int) *multiExec {
	return &multiExec{l: l, tx: tx, cols: cols, args: make([]any, 0, cols*l.largest())}
}

func (m *multiExec) add(ctx context.Context, row ...any) error {
	m.args = append(m.args, row...)
	return m.added(ctx)
}

// added runs the largest statement when the rows appended to m.args by
// the caller fill it.
func (m *multiExec) added(ctx context.Context) error {
	if len(m.args) >= m.cols*m.l.largest() {
		if err := m.l.exec(ctx, m.tx, m.cols, m.args, nil); err != nil {
			return err
		}
		m.args = m.args[:0]
	}
	return nil
}

func (m *multiExec) flush(ctx context.Context) error {
	err := m.l.exec(ctx, m.tx, m.cols, m.args, nil)
	m.args = m.args[:0]
	return err
}

func (s *Store) flushTurns(ctx context.Context, tx *sql.Tx) error {
	turns := newMultiExec(tx, s.insTurn, turnHotCols)
	infos := newMultiExec(tx, s.insTurnInfo, turnInfoCols)
	// A turn lasts less than TurnWindow, so a stored turn that a pending
	// one continues started at most TurnWindow before it: from floor on,
	// the known map has it if it exists.
	floor := s.knownLo*minuteMS + s.cfg.TurnWindow.Milliseconds()
	// Turns are written in key order, so that each statement writes
	// neighbouring rows.
	pend := make([]*turnState, 0, len(s.pend.turns))
	for _, d := range s.pend.turns {
		pend = append(pend, d)
	}
	slices.SortFunc(pend, func(a, b *turnState) int {
		return cmp.Or(cmp.Compare(a.minute(), b.minute()), cmp.Compare(a.th, b.th))
	})
	// This materialization's seq is the last span id it covers, above
	// every earlier one's.
	chunks := versionChunks{seq: s.pend.lastID}
	moved := map[chunkKey][]int64{}
	users := userDeltas{}
	for _, d := range pend {
		th := d.th
		t := d
		if minute, ok := s.known[th]; ok || d.ts < floor {
			old, err := s.readTurn(ctx, tx, th, d.trace, minute, ok, d.ts)
			if err != nil {
				return err
			}
			if old != nil {
				if old.trace != d.trace {
					s.log.Warn("eventstore: two traces hash alike; the later one's turn is not stored", "trace", d.trace, "stored", old.trace)
					continue
				}
				if err := s.leave(ctx, tx, old, moved); err != nil {
					return fmt.Errorf("eventstore: materialize turns: %w", err)
				}
				oldMinute := old.minute()
				users.add(old, -1)
				old.merge(d)
				t = old
				// A turn that now starts in an earlier minute moves: its
				// rows under the old keys go (same keys are replaced).
				if t.minute() != oldMinute {
					if err := s.txExec(ctx, tx, sqlDeleteTurn, oldMinute, th); err != nil {
						return fmt.Errorf("eventstore: materialize turns: %w", err)
					}
					if err := s.txExec(ctx, tx, sqlDeleteTurnInfo, oldMinute, th); err != nil {
						return fmt.Errorf("eventstore: materialize turns: %w", err)
					}
				}
			}
		}
		t.vseq = chunks.seq
		chunks.add(t)
		users.add(t, 1)
		turns.args = t.hotArgs(turns.args)
		if err := turns.added(ctx); err != nil {
			return fmt.Errorf("eventstore: materialize turns: %w", err)
		}
		infos.args = t.infoArgs(infos.args)
		if err := infos.added(ctx); err != nil {
			return fmt.Errorf("eventstore: materialize turns: %w", err)
		}
		s.known[th] = t.minute()
	}
	if err := turns.flush(ctx); err != nil {
		return fmt.Errorf("eventstore: materialize turns: %w", err)
	}
	if err := infos.flush(ctx); err != nil {
		return fmt.Errorf("eventstore: materialize turns: %w", err)
	}
	if err := leaveChunks(ctx, tx, moved); err != nil {
		return fmt.Errorf("eventstore: materialize turns: %w", err)
	}
	if err := chunks.write(ctx, tx, s.insChunk); err != nil {
		return fmt.Errorf("eventstore: materialize turns: %w", err)
	}
	return s.flushUserRollup(ctx, tx, users)
}

// readTurn reads a stored turn: at its known minute, or else searching the
// TurnWindow either side of the span that started at ts. It returns nil
// when there is none.
func (s *Store) readTurn(ctx context.Context, q querier, th int64, trace string, minute int64, known bool, ts int64) (*turnState, error) {
	var row *sql.Row
	if tx, ok := q.(*sql.Tx); ok && known {
		row = tx.StmtContext(ctx, s.stmts[sqlReadTurn]).QueryRowContext(ctx, minute, th)
	} else if known {
		row = q.QueryRowContext(ctx, sqlReadTurn, minute, th)
	} else {
		// The stored part of the turn started within a TurnWindow of
		// this one, before or after it (its earlier spans may be the
		// late ones).
		at, w := floorTo(ts, minuteMS)/minuteMS, s.cfg.TurnWindow.Milliseconds()/minuteMS+1
		lo, hi := at-w, at+w
		row = q.QueryRowContext(ctx, `WITH RECURSIVE m(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM m WHERE x < ?)
			SELECT `+turnCols+` FROM m JOIN turns t ON t.minute = m.x AND t.th = ?
			JOIN turn_info i ON i.minute = t.minute AND i.th = t.th LIMIT 1`, lo, hi, th)
	}
	t, err := scanTurnState(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("eventstore: read turn %s: %w", trace, err)
	}
	return t, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Statements run once per turn, prepared at Open (a statement cannot be
// prepared on the writer's single connection while a transaction holds it).
const (
	sqlReadTurn          = `SELECT ` + turnCols + ` FROM ` + turnFrom + ` WHERE t.minute = ? AND t.th = ?`
	sqlDeleteTurn        = `DELETE FROM turns WHERE minute = ? AND th = ?`
	sqlDeleteTurnInfo    = `DELETE FROM turn_info WHERE minute = ? AND th = ?`
	sqlDeleteTurnVersion = `DELETE FROM turn_versions WHERE vid = ? AND ts_start = ? AND th = ?`
)

var preparedSQL = []string{sqlReadTurn, sqlDeleteTurn, sqlDeleteTurnInfo, sqlDeleteTurnVersion}

// txExec runs query, one of preparedSQL, in tx.
func (s *Store) txExec(ctx context.Context, tx *sql.Tx, query string, args ...any) error {
	_, err := tx.StmtContext(ctx, s.stmts[query]).ExecContext(ctx, args...)
	return err
}

func insertTurnSQL(rows int) string {
	one := "(" + strings.Repeat("?,", turnHotCols-1) + "?)"
	return `INSERT OR REPLACE INTO turns VALUES ` + strings.Repeat(one+",", rows-1) + one
}

func insertTurnInfoSQL(rows int) string {
	one := "(" + strings.Repeat("?,", turnInfoCols-1) + "?)"
	return `INSERT OR REPLACE INTO turn_info VALUES ` + strings.Repeat(one+",", rows-1) + one
}
