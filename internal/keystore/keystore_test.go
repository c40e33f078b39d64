package keystore

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/pgtest"
)

// conformance runs the suite every Store passes.
func conformance(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()
	t.Run("put, get, list, version", func(t *testing.T) {
		s := open(t)
		v0, err := s.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)
		a := Record{ID: "key_a", Name: "shop", Team: "acme", UserID: "u-a", Models: []string{"haiku"}, MonthlyCostUSD: 20,
			Hash: "h-a", PrevHash: "h-old", PrevUntil: now.Add(time.Hour), SealedSecret: []byte{1, 2, 3}, PrevSealed: []byte{4}, CreatedAt: now, UpdatedAt: now}
		if err := s.Put(ctx, a); err != nil {
			t.Fatal(err)
		}
		v1, _ := s.Version(ctx)
		if v1 <= v0 {
			t.Fatalf("version %d after a put, was %d", v1, v0)
		}
		got, ok, err := s.Get(ctx, "key_a")
		if err != nil || !ok {
			t.Fatalf("Get: %v, %v", ok, err)
		}
		if got.Hash != "h-a" || got.PrevHash != "h-old" || string(got.SealedSecret) != "\x01\x02\x03" || string(got.PrevSealed) != "\x04" ||
			got.Team != "acme" || got.Models[0] != "haiku" || got.MonthlyCostUSD != 20 || !got.PrevUntil.Equal(a.PrevUntil) || !got.CreatedAt.Equal(now) {
			t.Fatalf("Get = %+v, want %+v", got, a)
		}
		a.RevokedAt = now.Add(time.Minute)
		if err := s.Put(ctx, a); err != nil {
			t.Fatal(err)
		}
		if v2, _ := s.Version(ctx); v2 <= v1 {
			t.Fatalf("version %d after a change, was %d", v2, v1)
		}
		if err := s.Put(ctx, Record{ID: "key_b", Name: "other", Hash: "h-b"}); err != nil {
			t.Fatal(err)
		}
		all, err := s.List(ctx)
		if err != nil || len(all) != 2 || all[0].ID != "key_a" || all[0].RevokedAt.IsZero() || all[1].Hash != "h-b" {
			t.Fatalf("List = %+v, %v", all, err)
		}
		if _, ok, err := s.Get(ctx, "key_none"); ok || err != nil {
			t.Fatalf("Get of an unknown id: %v, %v", ok, err)
		}
	})
	t.Run("concurrent puts all land and each moves the version", func(t *testing.T) {
		s := open(t)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				if err := s.Put(ctx, Record{ID: "key_" + string(rune('a'+i)), Name: "k", Hash: "h"}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		all, _ := s.List(ctx)
		v, _ := s.Version(ctx)
		if len(all) != 20 || v < 20 {
			t.Fatalf("%d keys, version %d; want 20 keys and a version of at least 20", len(all), v)
		}
	})
}

func TestSQLiteConformance(t *testing.T) {
	conformance(t, func(t *testing.T) Store {
		s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "keys.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestPostgresConformance(t *testing.T) {
	conformance(t, func(t *testing.T) Store {
		s, err := OpenPostgres(context.Background(), pgtest.DSN(), pgtest.Schema(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newRegistry(t *testing.T, store Store, clk *clock, seal []byte) *Registry {
	t.Helper()
	r, err := NewRegistry(context.Background(), store, Options{HashKey: []byte("test hash key"), SealKey: seal, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func memStore(t *testing.T) Store {
	t.Helper()
	s, err := OpenSQLite(context.Background(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A key's life: created (its secret shown once, never stored), used,
// rotated (both secrets work through the grace, then only the new),
// revoked; and a second registry on the same store (another instance)
// sees each change once it refreshes.
func TestKeyLifecycle(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)}
	store := memStore(t)
	r := newRegistry(t, store, clk, nil)
	other := newRegistry(t, store, clk, nil)

	k, err := r.Create(ctx, Spec{Name: "shop app", Team: "acme", Models: []string{"haiku"}, MonthlyCostUSD: 20}, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.Secret, "fmk_") || len(k.Secret) < 30 || k.Record.Prefix != k.Secret[:10] || k.Record.UserID != "key:"+k.Record.ID {
		t.Fatalf("issued %+v", k)
	}
	all, _ := store.List(ctx)
	for _, rec := range all {
		if strings.Contains(rec.Hash+rec.PrevHash+string(rec.SealedSecret), k.Secret) {
			t.Fatal("the secret is stored")
		}
	}
	if got, ok := r.Lookup(k.Secret); !ok || got.ID != k.Record.ID || got.Team != "acme" {
		t.Fatalf("Lookup of the new key: %+v, %v", got, ok)
	}
	if _, ok := other.Lookup(k.Secret); ok {
		t.Fatal("the other instance knew the key before refreshing")
	}
	if err := other.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := other.Lookup(k.Secret); !ok {
		t.Fatal("the other instance does not know the key after refreshing")
	}

	rot, err := r.Rotate(ctx, k.Record.ID, time.Hour, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if rot.Secret == k.Secret {
		t.Fatal("rotation kept the secret")
	}
	if err := other.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, inst := range []*Registry{r, other} {
		for name, s := range map[string]string{"old": k.Secret, "new": rot.Secret} {
			if got, ok := inst.Lookup(s); !ok || got.ID != k.Record.ID {
				t.Fatalf("the %s secret refused during the grace", name)
			}
		}
	}
	clk.Advance(time.Hour)
	for _, inst := range []*Registry{r, other} {
		if _, ok := inst.Lookup(k.Secret); ok {
			t.Fatal("the old secret still works after the grace")
		}
		if _, ok := inst.Lookup(rot.Secret); !ok {
			t.Fatal("the new secret refused after the grace")
		}
	}

	if _, err := r.Revoke(ctx, k.Record.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup(rot.Secret); ok {
		t.Fatal("a revoked key works")
	}
	_ = other.Refresh(ctx)
	if _, ok := other.Lookup(rot.Secret); ok {
		t.Fatal("a revoked key works on the other instance after it refreshed")
	}
	if _, err := r.Rotate(ctx, k.Record.ID, time.Hour, "admin"); err == nil {
		t.Fatal("a revoked key rotated")
	}
	if _, ok := r.Lookup("fmk_not-a-key"); ok {
		t.Fatal("an unknown secret was found")
	}
}

func TestKeyExpiresAndUpdates(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)}
	r := newRegistry(t, memStore(t), clk, nil)
	k, err := r.Create(ctx, Spec{Name: "trial", ExpiresAt: clk.Now().Add(24 * time.Hour)}, "admin")
	if err != nil {
		t.Fatal(err)
	}
	budget := 5.0
	models := []string{"sonnet"}
	up, err := r.Update(ctx, k.Record.ID, Patch{DailyCostUSD: &budget, Models: &models}, "admin")
	if err != nil || up.DailyCostUSD != 5 || up.Models[0] != "sonnet" || up.Name != "trial" {
		t.Fatalf("Update = %+v, %v", up, err)
	}
	if got, ok := r.Lookup(k.Secret); !ok || got.DailyCostUSD != 5 {
		t.Fatalf("Lookup after the update: %+v, %v", got, ok)
	}
	clk.Advance(24 * time.Hour)
	if _, ok := r.Lookup(k.Secret); ok {
		t.Fatal("an expired key works")
	}
	neg := -1.0
	var inv *InvalidError
	if _, err := r.Update(ctx, k.Record.ID, Patch{MonthlyCostUSD: &neg}, "admin"); !errors.As(err, &inv) || !strings.Contains(err.Error(), "monthlyCostUsd") {
		t.Fatalf("a negative budget: %v", err)
	}
	if _, err := r.Create(ctx, Spec{}, "admin"); !errors.As(err, &inv) || !strings.Contains(err.Error(), "name") {
		t.Fatalf("a key without a name: %v", err)
	}
	if _, err := r.Update(ctx, "key_none", Patch{}, "admin"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown id: %v", err)
	}
}

// A Bedrock signing key keeps its secret access key sealed: the registry
// opens it for a signature check, and not without the seal key.
func TestBedrockSigningKey(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)}
	store := memStore(t)
	if _, err := newRegistry(t, store, clk, nil).Create(ctx, Spec{Name: "b", Bedrock: true}, "admin"); err == nil || !strings.Contains(err.Error(), "FMGATE_KEY_SEAL_KEY") {
		t.Fatalf("a signing key without a seal key: %v", err)
	}
	seal, err := ParseSealKey(strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, store, clk, seal)
	k, err := r.Create(ctx, Spec{Name: "bedrock app", Bedrock: true}, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.Record.AccessKeyID, "FMAK") || k.Secret == "" {
		t.Fatalf("issued %+v", k)
	}
	rec, _, _ := store.Get(ctx, k.Record.ID)
	if strings.Contains(string(rec.SealedSecret), k.Secret) {
		t.Fatal("the secret access key is stored in the clear")
	}
	if s, ok := r.SigningSecret(k.Record.AccessKeyID); !ok || s != k.Secret {
		t.Fatalf("SigningSecret = %q, %v", s, ok)
	}
	rot, err := r.Rotate(ctx, k.Record.ID, time.Minute, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := r.SigningSecret(k.Record.AccessKeyID); !ok || s != k.Secret {
		t.Fatalf("the old pair during the grace: %q, %v", s, ok)
	}
	if s, ok := r.SigningSecret(rot.Record.AccessKeyID); !ok || s != rot.Secret || rot.Record.AccessKeyID == k.Record.AccessKeyID {
		t.Fatalf("the new pair: %q, %v", s, ok)
	}
	wrong := newRegistry(t, store, clk, []byte(strings.Repeat("x", 32)))
	if _, ok := wrong.SigningSecret(rot.Record.AccessKeyID); ok {
		t.Fatal("opened with another seal key")
	}
}

// The key store's files are the gateway's alone: the database and the
// write-ahead log SQLite keeps beside it.
func TestSQLiteFilesArePrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(context.Background(), Record{ID: "key_a", Name: "a", Hash: "h"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Fatalf("%s has mode %v; want no access for group or others", f, st.Mode().Perm())
		}
	}
}

// Two instances change keys at once: the change that drew the lower
// sequence number commits last. The version must still move when it
// lands, or the instances that refreshed in between would never see it
// (a revocation missed until some other key changed).
func TestPostgresVersionSeesALateCommit(t *testing.T) {
	ctx := context.Background()
	s, err := OpenPostgres(ctx, pgtest.DSN(), pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	clk := &clock{t: time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)}
	r := newRegistry(t, s, clk, nil)
	k, err := r.Create(ctx, Spec{Name: "shop"}, "admin")
	if err != nil {
		t.Fatal(err)
	}
	other := newRegistry(t, s, clk, nil)

	// The revocation draws its sequence number first and commits last.
	revoked := toStored(k.Record)
	revoked.RevokedAt = clk.Now()
	data, _ := json.Marshal(revoked)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE fmgate_api_keys SET seq = nextval('fmgate_api_keys_seq'), data = $2 WHERE id = $1`, k.Record.ID, data); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, Spec{Name: "another"}, "admin"); err != nil {
		t.Fatal(err)
	}
	if err := other.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := other.Lookup(k.Secret); !ok {
		t.Fatal("the key is refused before its revocation committed")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := other.Lookup(k.Secret); ok {
		t.Fatal("a revocation committed after a later change is never seen: the key still works")
	}
}

// A patch names the fields it sends, as the admin API spells them, and no
// other: an update's audit says what it changed.
func TestPatchFields(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []string
	}{
		{"nothing", `{}`, nil},
		{"models and a budget", `{"monthlyCostUsd":20,"models":["haiku"]}`, []string{"models", "monthlyCostUsd"}},
		{"a field set to its zero", `{"name":"","payloadLog":false,"expiresAt":"0001-01-01T00:00:00Z"}`, []string{"name", "expiresAt", "payloadLog"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Patch
			if err := json.Unmarshal([]byte(tt.give), &p); err != nil {
				t.Fatal(err)
			}
			if got := p.Fields(); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("Fields() = %v, want %v", got, tt.want)
			}
		})
	}
}
