package bedrock_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// TestSimFaultsOnTheWire: the simulator's refusals are Bedrock's own HTTP
// shape, which the SDKs parse by X-Amzn-ErrorType.
func TestSimFaultsOnTheWire(t *testing.T) {
	tests := []struct {
		name       string
		settings   func(*sim.Settings)
		wantStatus int
		wantType   string
		wantRetry  string
	}{
		{"throttled", func(s *sim.Settings) { s.ErrorRate = map[provider.Kind]float64{provider.KindThrottled: 1} }, 429, "ThrottlingException", "1"},
		{"outage", func(s *sim.Settings) { s.Outage = true }, 503, "ServiceUnavailableException", ""},
		{"not ready", func(s *sim.Settings) { s.ErrorRate = map[provider.Kind]float64{provider.KindNotReady: 1} }, 429, "ModelNotReadyException", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sim.New(sim.Config{Models: map[string]sim.Settings{"sonnet": {ModelID: sonnetModelID, TokensPerSecond: 1000}}}, sim.Options{})
			if err != nil {
				t.Fatal(err)
			}
			st, _ := s.Settings("sonnet")
			tt.settings(&st)
			if err := s.SetSettings("sonnet", st); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(simserver.Handler(s))
			defer srv.Close()
			for _, op := range []string{"converse", "converse-stream"} {
				resp, err := http.Post(srv.URL+"/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/"+op, "application/json",
					strings.NewReader(`{"messages":[{"role":"user","content":[{"text":"hello"}]}]}`))
				if err != nil {
					t.Fatal(err)
				}
				var body struct{ Message string }
				_ = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode != tt.wantStatus || resp.Header.Get("X-Amzn-ErrorType") != tt.wantType || body.Message == "" ||
					resp.Header.Get("Retry-After") != tt.wantRetry {
					t.Fatalf("%s: %d %q %q retry-after %q; want %d %s, a message, retry-after %q", op, resp.StatusCode,
						resp.Header.Get("X-Amzn-ErrorType"), body.Message, resp.Header.Get("Retry-After"), tt.wantStatus, tt.wantType, tt.wantRetry)
				}
			}
		})
	}
}
