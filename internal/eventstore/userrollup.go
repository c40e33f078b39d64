package eventstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// The user roll-up sums turns per (feature, user) by the hour and by the
// day of the turn's start, so that "a feature's costliest users" reads one
// row per user and bucket of that feature instead of every turn in range;
// two more levels sum every feature's turns per user (feature ""), for the
// costliest users overall.
// It follows the turns table exactly: a turn's row is added under its key
// (start bucket, feature, user); when later spans change that key (the
// turn starts earlier, or its feature or user is now another), the stored
// turn's sums are taken out under the old key in the same transaction.
// Rows are keyed feature first, so one feature's range is contiguous.

// userLevels are the per-feature levels' bucket widths, coarsest first
// (for plan); allUserLevels those of every feature together.
var (
	userLevels    = []level{{1, false, dayMS}, {0, false, hourMS}}
	allUserLevels = []level{{3, false, dayMS}, {2, false, hourMS}}
)

const userRollupCols = 12

var userRollupSchema = []string{
	`CREATE TABLE IF NOT EXISTS user_rollup (
		lvl INTEGER NOT NULL,
		feature TEXT NOT NULL,
		bucket INTEGER NOT NULL,
		user_id_hash TEXT NOT NULL,
		cost_usd REAL NOT NULL,
		turns INTEGER NOT NULL,
		spans INTEGER NOT NULL,
		tokens_in INTEGER NOT NULL,
		tokens_out INTEGER NOT NULL,
		errors INTEGER NOT NULL,
		fallbacks INTEGER NOT NULL,
		latency_ms INTEGER NOT NULL,
		PRIMARY KEY (lvl, feature, bucket, user_id_hash)
	) WITHOUT ROWID`,
}

// backfillUserRollup fills an empty user roll-up from the turns of a store
// written before it existed.
func (s *Store) backfillUserRollup(ctx context.Context) error {
	var filled, turns bool
	if err := s.w.QueryRowContext(ctx, `SELECT EXISTS(SELECT 1 FROM user_rollup), EXISTS(SELECT 1 FROM turns)`).Scan(&filled, &turns); err != nil {
		return fmt.Errorf("eventstore: user roll-up: %w", err)
	}
	if filled || !turns {
		return nil
	}
	for _, ls := range [][]level{userLevels, allUserLevels} {
		all := ls[0].id == allUserLevels[0].id
		for _, l := range ls {
			_, err := s.w.ExecContext(ctx, `INSERT INTO user_rollup SELECT ?, CASE WHEN ? THEN '' ELSE feature END, ts_start - ts_start % ?,
				user_id_hash, SUM(cost_usd), SUM(has_root), SUM(spans), SUM(tokens_in), SUM(tokens_out), SUM(errors), SUM(fallbacks),
				SUM(latency_ms) FROM turns GROUP BY 2, 3, 4`, l.id, all, l.width)
			if err != nil {
				return fmt.Errorf("eventstore: user roll-up: %w", err)
			}
		}
	}
	return nil
}

func userRollupSQL(rows int) string {
	one := "(" + strings.Repeat("?,", userRollupCols-1) + "?)"
	return `INSERT INTO user_rollup VALUES ` + strings.Repeat(one+",", rows-1) + one + ` ON CONFLICT DO UPDATE SET
		cost_usd = cost_usd + excluded.cost_usd, turns = turns + excluded.turns, spans = spans + excluded.spans,
		tokens_in = tokens_in + excluded.tokens_in, tokens_out = tokens_out + excluded.tokens_out,
		errors = errors + excluded.errors, fallbacks = fallbacks + excluded.fallbacks,
		latency_ms = latency_ms + excluded.latency_ms`
}

type userKey struct {
	lvl     int
	feature string
	bucket  int64
	user    string
}

// userDeltas are the changes to the user roll-up of one materialization.
type userDeltas map[userKey]*agg

// add adds (sign 1) or takes out (sign −1) a turn's row under its key.
func (d userDeltas) add(t *turnState, sign int64) {
	var root int64
	if t.hasRoot() {
		root = 1
	}
	for i, l := range slices.Concat(userLevels, allUserLevels) {
		feature := t.feature
		if i >= len(userLevels) {
			feature = "" // every feature together
		}
		k := userKey{l.id, feature, floorTo(t.ts, l.width), t.user}
		a := d[k]
		if a == nil {
			a = &agg{}
			d[k] = a
		}
		a.spans += sign * t.sums.spans
		a.turns += sign * root
		a.tokensIn += sign * t.sums.tokensIn
		a.tokensOut += sign * t.sums.tokensOut
		a.cost += float64(sign) * t.sums.cost
		a.errors += sign * t.sums.errors
		a.fallbacks += sign * t.sums.fallbacks
		a.latency += sign * t.sums.latency
	}
}

// flushUserRollup writes d in tx, in key order.
func (s *Store) flushUserRollup(ctx context.Context, tx *sql.Tx, d userDeltas) error {
	keys := make([]userKey, 0, len(d))
	for k, a := range d {
		if *a != (agg{}) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b userKey) int {
		return cmp.Or(cmp.Compare(a.lvl, b.lvl), cmp.Compare(a.feature, b.feature), cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.user, b.user))
	})
	w := newMultiExec(tx, s.upsertUsers, userRollupCols)
	for _, k := range keys {
		a := d[k]
		if err := w.add(ctx, k.lvl, k.feature, k.bucket, k.user, a.cost, a.turns, a.spans, a.tokensIn, a.tokensOut,
			a.errors, a.fallbacks, a.latency); err != nil {
			return fmt.Errorf("eventstore: materialize user roll-up: %w", err)
		}
	}
	if err := w.flush(ctx); err != nil {
		return fmt.Errorf("eventstore: materialize user roll-up: %w", err)
	}
	return nil
}

// featureUsers answers ByUser with no user or graph filter, for one
// feature or all: the whole hours and days of the range from the user
// roll-up, the edges from the turns.
func (s *Store) featureUsers(ctx context.Context, q Query) ([]CostRow, CostRow, error) {
	levels := userLevels
	if q.Feature == "" {
		levels = allUserLevels
	}
	users := map[string]*agg{}
	var total agg
	read := func(query string, args ...any) error {
		rs, err := s.r.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rs.Close()
		var (
			user sql.RawBytes
			a    agg
		)
		for rs.Next() {
			if err := rs.Scan(&user, &a.cost, &a.turns, &a.spans, &a.tokensIn, &a.tokensOut, &a.errors, &a.fallbacks, &a.latency); err != nil {
				return err
			}
			g := users[string(user)]
			if g == nil {
				g = &agg{}
				users[string(user)] = g
			}
			g.addSums(&a)
			total.addSums(&a)
		}
		return rs.Err()
	}
	for _, p := range plan(q.From.UnixMilli(), q.To.UnixMilli(), levels, nil) {
		var err error
		if p.lvl != nil {
			err = read(`SELECT user_id_hash, cost_usd, turns, spans, tokens_in, tokens_out, errors, fallbacks, latency_ms
				FROM user_rollup WHERE lvl = ? AND feature = ? AND bucket >= ? AND bucket < ?`, p.lvl.id, q.Feature, p.from, p.to)
		} else {
			w := where{}
			turnRange(&w, p.from, p.to)
			turnFilters(&w, &q)
			err = read(`SELECT t.user_id_hash, `+turnAggCols+` FROM turns t WHERE `+w.String(), w.args...)
		}
		if err != nil {
			return nil, CostRow{}, err
		}
	}
	rows := make([]CostRow, 0, len(users))
	for u, a := range users {
		if a.spans != 0 { // every turn moved out of the range's buckets
			rows = append(rows, a.row(u))
		}
	}
	slices.SortFunc(rows, byCost)
	return rows[:min(len(rows), q.Limit)], total.row(""), nil
}
