package sim

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fmgate/fmgate/internal/provider"
)

func TestDefaultConfigIsValid(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"sonnet", "haiku"} {
		if _, ok := cfg.Models[m]; !ok {
			t.Errorf("DefaultConfig lacks %q", m)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	rates := func(kv ...any) map[provider.Kind]float64 {
		m := map[provider.Kind]float64{}
		for i := 0; i < len(kv); i += 2 {
			m[provider.Kind(kv[i].(string))] = kv[i+1].(float64)
		}
		return m
	}
	tests := []struct {
		name string
		give Settings
		want []string // substrings of the error, "" for valid
	}{
		{"zero is valid", Settings{}, nil},
		{"full valid", Settings{ErrorRate: rates("throttled", 0.5, "unavailable", 0.25, "timeout", 0.1, "not_ready", 0.1, "guardrail", 0.05), TPMCeiling: 1000}, nil},
		{"probability above 1", Settings{ErrorRate: rates("throttled", 1.5)}, []string{"models.m.errorRate.throttled: must be within [0,1]"}},
		{"negative probability", Settings{ErrorRate: rates("timeout", -0.1)}, []string{"models.m.errorRate.timeout: must be within [0,1]"}},
		{"NaN probability", Settings{ErrorRate: rates("timeout", math.NaN())}, []string{"models.m.errorRate.timeout: must be within [0,1]"}},
		{"sum above 1", Settings{ErrorRate: rates("throttled", 0.6, "unavailable", 0.6)}, []string{"models.m.errorRate: probabilities sum to 1.2, must be <= 1"}},
		{"unknown kind", Settings{ErrorRate: rates("validation", 0.1)}, []string{"models.m.errorRate.validation: unknown kind"}},
		{"negatives", Settings{LatencyMs: -1, TTFTMs: -2, TokensPerSecond: -3, StallAfterTokens: -4, CutAfterTokens: -5, TPMCeiling: -6, CacheMinTokens: -7}, []string{
			"models.m.latencyMs: must be >= 0", "models.m.ttftMs: must be >= 0", "models.m.tokensPerSecond: must be >= 0",
			"models.m.stallAfterTokens: must be >= 0", "models.m.cutAfterTokens: must be >= 0", "models.m.tpmCeiling: must be >= 0",
			"models.m.cacheMinTokens: must be >= 0",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Config{Models: map[string]Settings{"m": tt.give}}.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Errorf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate = nil, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %q, want it to contain %q", err, w)
				}
			}
			// Settings.Validate words the same problems relative to itself.
			if serr := tt.give.Validate(); serr == nil || strings.Contains(serr.Error(), "models.m.") {
				t.Errorf("Settings.Validate = %v, want the problems without the models.m. prefix", serr)
			}
		})
	}
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "models: ") {
		t.Errorf("empty config: Validate = %v, want a models: error", err)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	if _, err := New(Config{Models: map[string]Settings{"m": {TTFTMs: -1}}}, Options{}); err == nil {
		t.Error("New accepted ttftMs -1")
	}
}

func TestConfigFieldNames(t *testing.T) {
	const doc = `
models:
  sonnet:
    modelId: anthropic.claude-3-sonnet-20240229-v1:0
    outage: true
    errorRate: {throttled: 0.1, unavailable: 0.05, timeout: 0.01, not_ready: 0.02, guardrail: 0.03}
    latencyMs: 100
    ttftMs: 600
    tokensPerSecond: 60
    stallAfterTokens: 40
    cutAfterTokens: 50
    tpmCeiling: 200000
    cacheMinTokens: 1024
`
	want := Settings{
		ModelID: "anthropic.claude-3-sonnet-20240229-v1:0", Outage: true,
		ErrorRate: map[provider.Kind]float64{"throttled": 0.1, "unavailable": 0.05, "timeout": 0.01, "not_ready": 0.02, "guardrail": 0.03},
		LatencyMs: 100, TTFTMs: 600, TokensPerSecond: 60, StallAfterTokens: 40, CutAfterTokens: 50, TPMCeiling: 200000,
		CacheMinTokens: 1024,
	}
	var cfg Config
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Models["sonnet"]; !reflect.DeepEqual(got, want) {
		t.Errorf("YAML decoded %+v, want %+v", got, want)
	}

	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"modelId", "outage", "errorRate", "latencyMs", "ttftMs", "tokensPerSecond", "stallAfterTokens", "cutAfterTokens", "tpmCeiling", "cacheMinTokens"} {
		if _, ok := fields[name]; !ok {
			t.Errorf("JSON lacks field %q: %s", name, b)
		}
	}
	if len(fields) != 10 {
		t.Errorf("JSON has %d fields, want 10: %s", len(fields), b)
	}
}
