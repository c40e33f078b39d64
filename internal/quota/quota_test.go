package quota

import (
	"context"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestPriorityParse(t *testing.T) {
	tests := []struct {
		give    string
		want    Priority
		wantErr bool
	}{
		{"P0", P0, false}, {"p3", P3, false}, {" 2 ", P2, false}, {"P4", 0, true}, {"", 0, true}, {"high", 0, true},
	}
	for _, tt := range tests {
		got, err := ParsePriority(tt.give)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParsePriority(%q) = %v, %v", tt.give, got, err)
		}
		if err == nil && got.String() != "P"+strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(tt.give)), "P") {
			t.Errorf("String() = %q", got.String())
		}
	}
}

func TestConfigYAML(t *testing.T) {
	cfg := DefaultConfig()
	in := `
safetyMargin: 0.8
models:
  sonnet: {tpm: 10000, rpm: 10}
pauseAt: {P3: 0.5}
guaranteed: {P3: 0.05}
maxHold: 3m
`
	if err := yaml.Unmarshal([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.PauseAt[P3] != 0.5 || cfg.PauseAt[P1] != 0.9 || cfg.Guaranteed[P3] != 0.05 ||
		cfg.MaxHold != 3*time.Minute || cfg.Models["sonnet"] != (Ceiling{TPM: 10000, RPM: 10}) {
		t.Fatalf("decoded %+v", cfg)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"default ok", func(*Config) {}, ""},
		{"margin", func(c *Config) { c.SafetyMargin = 1.2 }, "safetyMargin: must be in (0, 1]"},
		{"model tpm", func(c *Config) { c.Models["haiku"] = Ceiling{RPM: 1} }, "models.haiku.tpm: must be > 0"},
		{"missing class", func(c *Config) { delete(c.PauseAt, P2) }, "pauseAt.P2: must be set"},
		{"inverted ladder", func(c *Config) { c.PauseAt[P3] = 0.95 }, "pauseAt.P3: must not exceed pauseAt.P2"},
		{"guarantees", func(c *Config) { c.Guaranteed = map[Priority]float64{P2: 0.6, P3: 0.6} }, "guaranteed: shares must sum to at most 1"},
		{"max hold", func(c *Config) { c.MaxHold = time.Second }, "maxHold: must be >= 1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.modify(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// BenchmarkMemoryReserve measures a reserve+settle pair on a busy ledger.
func BenchmarkMemoryReserve(b *testing.B) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	cfg := DefaultConfig()
	cfg.Models = map[string]Ceiling{"sonnet": {TPM: 1 << 40, RPM: 1 << 40}}
	l, _ := NewMemory(cfg, clock)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%100 == 0 {
			now = now.Add(time.Second) // keep all 60 buckets live
		}
		r, err := l.Reserve(ctx, "sonnet", P0, 2000)
		if err != nil {
			b.Fatal(err)
		}
		_ = r.Settle(ctx, 1500)
	}
}

// BenchmarkMemoryReserveParallel shows contention on the one ledger lock.
func BenchmarkMemoryReserveParallel(b *testing.B) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Models = map[string]Ceiling{"sonnet": {TPM: 1 << 40, RPM: 1 << 40}}
	l, _ := NewMemory(cfg, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := l.Reserve(ctx, "sonnet", P1, 2000)
			if err != nil {
				b.Fatal(err)
			}
			_ = r.Settle(ctx, 1500)
		}
	})
}
