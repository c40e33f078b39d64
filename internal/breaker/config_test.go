package breaker

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		give func(*Config)
		want []string // substrings of the error; nil means valid
	}{
		{"default is valid", func(*Config) {}, nil},
		{"rate of 1 is valid", func(c *Config) { c.FailureRate = 1 }, nil},
		{"zero threshold", func(c *Config) { c.FailureThreshold = 0 }, []string{"failureThreshold: must be > 0"}},
		{"zero rate", func(c *Config) { c.FailureRate = 0 }, []string{"failureRate: must be in (0, 1]"}},
		{"rate above 1", func(c *Config) { c.FailureRate = 1.5 }, []string{"failureRate: must be in (0, 1]"}},
		{"zero minCalls", func(c *Config) { c.MinCalls = 0 }, []string{"minCalls: must be > 0"}},
		{"negative window", func(c *Config) { c.Window = -time.Second }, []string{"window: must be > 0"}},
		{"zero openTimeout", func(c *Config) { c.OpenTimeout = 0 }, []string{"openTimeout: must be > 0"}},
		{"no stages", func(c *Config) { c.Stages = nil }, []string{"stages: must not be empty"}},
		{"non-positive stage", func(c *Config) { c.Stages = []int{1, 0, 3} }, []string{"stages[1]: must be > 0"}},
		{"zero halfOpenWait", func(c *Config) { c.HalfOpenWait = 0 }, []string{"halfOpenWait: must be > 0"}},
		{
			"every problem is reported",
			func(c *Config) { *c = Config{} },
			[]string{"failureThreshold", "failureRate", "minCalls", "window", "openTimeout", "stages", "halfOpenWait"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.give(&c)
			err := c.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %v", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	tests := []struct {
		name      string
		threshold int
		rate      float64
		window    time.Duration
		open      time.Duration
	}{
		{"sonnet", 5, 0.5, 60 * time.Second, 60 * time.Second},
		{"haiku", 8, 0.5, 60 * time.Second, 30 * time.Second},
		{"redis", 15, 0.4, 30 * time.Second, 15 * time.Second},
		{"session_store", 10, 0.2, 30 * time.Second, 30 * time.Second},
		{"search", 5, 0.3, 30 * time.Second, 45 * time.Second},
		{"guardrail", 5, 0.5, 30 * time.Second, 30 * time.Second},
	}
	all := Defaults()
	if len(all) != len(tests) {
		t.Errorf("Defaults() has %d breakers, want %d", len(all), len(tests))
	}
	if err := ValidateAll(all); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	for _, tt := range tests {
		c, ok := all[tt.name]
		if !ok {
			t.Errorf("Defaults() lacks %q", tt.name)
			continue
		}
		if c.FailureThreshold != tt.threshold || c.FailureRate != tt.rate || c.Window != tt.window ||
			c.OpenTimeout != tt.open || c.MinCalls != 5 || c.HalfOpenWait != 10*time.Second ||
			len(c.Stages) != 3 || c.Stages[0] != 1 || c.Stages[1] != 3 || c.Stages[2] != 10 {
			t.Errorf("%s = %+v", tt.name, c)
		}
	}
	all["sonnet"].Stages[0] = 99
	if Defaults()["sonnet"].Stages[0] != 1 {
		t.Error("Defaults shares its Stages slice between calls")
	}
}

func TestValidateAllNamesTheBreaker(t *testing.T) {
	c := DefaultConfig()
	c.FailureRate = 2
	err := ValidateAll(map[string]Config{"haiku": c, "sonnet": DefaultConfig()})
	if err == nil || err.Error() != "haiku.failureRate: must be in (0, 1]" {
		t.Fatalf("ValidateAll = %v", err)
	}
}

func TestConfigYAML(t *testing.T) {
	const doc = `
sonnet:
  failureThreshold: 7
  failureRate: 0.25
  minCalls: 10
  window: 45s
  openTimeout: 1m30s
  stages: [2, 4]
  halfOpenWait: 5s
`
	var got map[string]Config
	if err := yaml.Unmarshal([]byte(doc), &got); err != nil {
		t.Fatal(err)
	}
	c := got["sonnet"]
	if c.FailureThreshold != 7 || c.FailureRate != 0.25 || c.MinCalls != 10 || c.Window != 45*time.Second ||
		c.OpenTimeout != 90*time.Second || len(c.Stages) != 2 || c.Stages[1] != 4 || c.HalfOpenWait != 5*time.Second {
		t.Fatalf("decoded %+v", c)
	}
}

func TestConstructorsRepairInvalidConfig(t *testing.T) {
	clock := newFakeClock()
	b := NewMemory("m", Config{FailureThreshold: 2, Stages: []int{0}}, clock.Now)
	record(t, b, "F")
	wantState(t, b, Closed, "after one failure with threshold 2")
	record(t, b, "F")
	wantState(t, b, Open, "after two failures")
	clock.Advance(DefaultConfig().OpenTimeout)
	admit(t, b, 1) // invalid stages fall back to [1, 3, 10]
	if s := snapshot(t, b); s.StageProbes != 1 {
		t.Fatalf("StageProbes = %d, want 1", s.StageProbes)
	}
}
