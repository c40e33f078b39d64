package retry

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fmgate/fmgate/internal/provider"
)

func TestDefaultConfigValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Config)
		want   []string
	}{
		{"strategy", func(c *Config) { c.Strategy = "linear" }, []string{"strategy: must be one of"}},
		{"base", func(c *Config) { c.Base = 0 }, []string{"base: must be > 0"}},
		{"cap below base", func(c *Config) { c.Cap = 50 * time.Millisecond }, []string{"cap: must be >= base"}},
		{"multiplier", func(c *Config) { c.Multiplier = 0.5 }, []string{"multiplier: must be 0"}},
		{"maxRetries", func(c *Config) { c.MaxRetries = -1 }, []string{"maxRetries: must be in [0,20]"}},
		{"too many retries", func(c *Config) { c.MaxRetries = 100 }, []string{"maxRetries: must be in [0,20]"}},
		{"unknown class", func(c *Config) { c.Classes["teapot"] = ClassPolicy{} }, []string{"classes.teapot: unknown error class"}},
		{"retrying guardrail", func(c *Config) { c.Classes[provider.KindGuardrail] = ClassPolicy{MaxRetries: intp(2)} }, []string{"classes.guardrail.maxRetries: must be 0"}},
		{"retrying validation", func(c *Config) { c.Classes[provider.KindValidation] = ClassPolicy{MaxRetries: intp(1)} }, []string{"classes.validation.maxRetries: must be 0"}},
		{"retrying unknown", func(c *Config) { c.Classes[provider.KindUnknown] = ClassPolicy{MaxRetries: intp(1)} }, []string{"classes.unknown.maxRetries: must be 0"}},
		{"class base above cap", func(c *Config) {
			c.Classes[provider.KindThrottled] = ClassPolicy{Base: time.Minute}
		}, []string{"classes.throttled.base: must be <= cap"}},
		{"class multiplier", func(c *Config) {
			c.Classes[provider.KindTimeout] = ClassPolicy{Multiplier: 0.1}
		}, []string{"classes.timeout.multiplier"}},
		{"ratio", func(c *Config) { c.Budget.Ratio = 1.5 }, []string{"budget.ratio: must be in [0,1]"}},
		{"negative ratio", func(c *Config) { c.Budget.Ratio = -0.1 }, []string{"budget.ratio: must be in [0,1]"}},
		{"budget floor", func(c *Config) { c.Budget.MinPerSecond = -1 }, []string{"budget.minPerSecond: must be >= 0"}},
		{"budget window", func(c *Config) { c.Budget.Window = 0 }, []string{"budget.window: must be >= 1s"}},
		{"thresholds out of order", func(c *Config) { c.Pressure.Thresholds.High = 0.6 }, []string{"pressure.thresholds.open: must be in (high,1]"}},
		{"slight threshold", func(c *Config) { c.Pressure.Thresholds.Slight = 0 }, []string{"pressure.thresholds.slight"}},
		{"cooldown", func(c *Config) { c.Pressure.Cooldown = 0 }, []string{"pressure.cooldown: must be > 0"}},
		{"level multiplier", func(c *Config) { c.Pressure.Levels.High.BaseMultiplier = 0 }, []string{"pressure.levels.high.baseMultiplier: must be >= 1"}},
		{"minAttemptTime", func(c *Config) { c.MinAttemptTime = -time.Second }, []string{"minAttemptTime: must be >= 0"}},
		{"several at once", func(c *Config) { c.Base = 0; c.Budget.Ratio = 2; c.Pressure.Window = 0 },
			[]string{"base: must be > 0", "budget.ratio", "pressure.window: must be >= 1s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.modify(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate accepted a broken config")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestConfigYAML(t *testing.T) {
	src := `
strategy: full
base: 50ms
cap: 2s
maxRetries: 2
minAttemptTime: 250ms
classes:
  throttled: {maxRetries: 1, base: 400ms, multiplier: 4}
budget: {ratio: 0.1, minPerSecond: 2, window: 20s}
pressure:
  window: 30s
  thresholds: {slight: 0.1, high: 0.3, open: 0.6}
  cooldown: 15s
  levels:
    high: {maxRetries: 0}
`
	c := DefaultConfig()
	if err := yaml.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	th := c.Classes[provider.KindThrottled]
	switch {
	case c.Strategy != StrategyFull || c.Base != 50*time.Millisecond || c.Cap != 2*time.Second || c.MaxRetries != 2:
		t.Errorf("top level not read: %+v", c)
	case c.MinAttemptTime != 250*time.Millisecond:
		t.Errorf("minAttemptTime = %v", c.MinAttemptTime)
	case th.MaxRetries == nil || *th.MaxRetries != 1 || th.Base != 400*time.Millisecond || th.Multiplier != 4:
		t.Errorf("throttled class = %+v", th)
	case c.Classes[provider.KindTimeout].MaxRetries == nil:
		t.Error("default timeout class lost when another class was overridden")
	case c.Budget != BudgetConfig{Ratio: 0.1, MinPerSecond: 2, Window: 20 * time.Second}:
		t.Errorf("budget = %+v", c.Budget)
	case c.Pressure.Window != 30*time.Second || c.Pressure.Thresholds.Open != 0.6 || c.Pressure.Cooldown != 15*time.Second:
		t.Errorf("pressure = %+v", c.Pressure)
	case c.Pressure.Levels.High.MaxRetries != 0 || c.Pressure.Levels.High.BaseMultiplier != 5:
		t.Errorf("high level policy should merge over the default: %+v", c.Pressure.Levels.High)
	case c.Pressure.MinSamples != 10:
		t.Errorf("unset pressure field lost its default: %d", c.Pressure.MinSamples)
	}
}
