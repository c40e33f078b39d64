package eventstore

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// synthTurns returns n turns' spans from g.
func synthTurns(g *synth, n int) []events.Event {
	var out []events.Event
	for range n {
		out = g.turn(out)
	}
	return out
}

// TestUserRollupFilledFromStoredTurns opens a file written before the user
// roll-up existed: Open fills it from the turns, and a feature's users read
// from it match those read from the turns alone, before and after more
// writes.
func TestUserRollupFilledFromStoredTurns(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.db")
	s := openTest(t, path)
	g := &synth{rng: rand.New(rand.NewPCG(5, 6)), start: t0, step: 30 * time.Second, users: 20}
	if err := s.Write(ctx, synthTurns(g, 300)); err != nil {
		t.Fatal(err)
	}
	if err := s.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `DROP TABLE user_rollup`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, path)
	q := Query{By: ByUser, Feature: synthFeatures[0], From: t0.Add(-26 * time.Hour), To: t0.Add(26 * time.Hour), Limit: 1000}
	check := func() {
		t.Helper()
		for _, feature := range []string{synthFeatures[0], ""} {
			q.Feature = feature
			checkQuery(t, s, q)
		}
	}
	check()
	if err := s.Write(ctx, synthTurns(g, 100)); err != nil {
		t.Fatal(err)
	}
	check()
}

// checkQuery compares featureUsers with topUsers for q.
func checkQuery(t *testing.T, s *Store, q Query) {
	t.Helper()
	ctx := context.Background()
	{
		if err := s.sync(ctx); err != nil {
			t.Fatal(err)
		}
		got, gotTotal, err := s.featureUsers(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		want, wantTotal, err := s.topUsers(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 || len(got) != len(want) || gotTotal.Spans != wantTotal.Spans || gotTotal.Turns != wantTotal.Turns {
			t.Fatalf("%d users (total %+v), want %d (total %+v)", len(got), gotTotal, len(want), wantTotal)
		}
		for i := range got {
			if got[i].Key != want[i].Key || got[i].Spans != want[i].Spans || got[i].Turns != want[i].Turns {
				t.Errorf("feature %q, user %d: %+v, want %+v", q.Feature, i, got[i], want[i])
			}
		}
	}
}
