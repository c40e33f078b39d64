package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestMemoryEvictsLeastRecentlyUsedByCount(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.MaxEntries = 3
	m := NewMemory(cfg, newFakeClock().Now)
	for _, k := range []string{"a", "b", "c"} {
		if err := m.Set(ctx, k, k); err != nil {
			t.Fatal(err)
		}
	}
	// Reading a makes b the least recently used.
	if _, ok, _ := m.Get(ctx, "a"); !ok {
		t.Fatal("a missing before eviction")
	}
	if err := m.Set(ctx, "d", "d"); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a": true, "b": false, "c": true, "d": true}
	for k, present := range want {
		if _, ok, _ := m.Get(ctx, k); ok != present {
			t.Errorf("%s present = %v, want %v", k, ok, present)
		}
	}
	if m.Len() != 3 {
		t.Errorf("Len = %d, want 3", m.Len())
	}
}

func TestMemoryEvictsByBytes(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	text := strings.Repeat("漫", 100) // 300 bytes
	per := int64(len("k0") + len(text) + entryOverhead)
	cfg.MaxBytes = 3*per + per/2 // room for three and a half
	m := NewMemory(cfg, newFakeClock().Now)
	for i := range 5 {
		if err := m.Set(ctx, fmt.Sprint("k", i), text); err != nil {
			t.Fatal(err)
		}
	}
	if m.Len() != 3 {
		t.Errorf("Len = %d, want 3", m.Len())
	}
	if m.Bytes() > cfg.MaxBytes {
		t.Errorf("Bytes = %d > MaxBytes %d", m.Bytes(), cfg.MaxBytes)
	}
	for i, want := range []bool{false, false, true, true, true} {
		if _, ok, _ := m.Get(ctx, fmt.Sprint("k", i)); ok != want {
			t.Errorf("k%d present = %v, want %v", i, ok, want)
		}
	}
	// Replacing an entry must not count it twice.
	if err := m.Set(ctx, "k4", "short"); err != nil {
		t.Fatal(err)
	}
	if got, want := m.Bytes(), 2*per+int64(len("k4")+len("short")+entryOverhead); got != want {
		t.Errorf("Bytes after replace = %d, want %d", got, want)
	}
}

func TestMemoryRejectsEntryLargerThanMaxBytes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBytes = 1000
	m := NewMemory(cfg, nil)
	if err := m.Set(context.Background(), "keep", "x"); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(context.Background(), "big", strings.Repeat("x", 2000)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Set(big) = %v, want ErrTooLarge", err)
	}
	if _, ok, _ := m.Get(context.Background(), "keep"); !ok {
		t.Error("a rejected entry evicted the others")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		give  func(*Config)
		wants []string
	}{
		{"default is valid", func(*Config) {}, nil},
		{"zero stale is valid", func(c *Config) { c.StaleFor = 0 }, nil},
		{"all bad", func(c *Config) { *c = Config{StaleFor: -1} }, []string{
			"ttl: must be > 0", "staleFor: must be >= 0", "maxEntries: must be > 0",
			"maxBytes: must be > 0", "timeout: must be > 0",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.give(&c)
			err := c.Validate()
			if len(tt.wants) == 0 && err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
			for _, w := range tt.wants {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want it to mention %q", err, w)
				}
			}
		})
	}
}

func BenchmarkMemoryGet(b *testing.B) {
	ctx := context.Background()
	m := NewMemory(DefaultConfig(), nil)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%032x", i)
		if err := m.Set(ctx, keys[i], "国内の通常配送は3〜5営業日でお届けします。"); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, ok, _ := m.Get(ctx, keys[i%len(keys)]); !ok {
			b.Fatal("miss")
		}
		i++
	}
}
