package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
)

func do(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	var out map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, path, rec.Body, err)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", method, path, ct)
		}
	}
	return rec.Code, out
}

func TestAdminGet(t *testing.T) {
	s, _ := newSim(t, 1, DefaultConfig().Models)
	code, body := do(t, s.Handler(), "GET", "/admin/sim/sonnet", "")
	if code != 200 {
		t.Fatalf("status %d, body %v", code, body)
	}
	want := map[string]any{
		"modelId": "anthropic.claude-3-sonnet-20240229-v1:0", "outage": false, "errorRate": map[string]any{},
		"latencyMs": 0.0, "ttftMs": 600.0, "tokensPerSecond": 60.0, "stallAfterTokens": 0.0, "cutAfterTokens": 0.0, "tpmCeiling": 0.0,
		"cacheMinTokens": 1024.0,
	}
	if !reflect.DeepEqual(body, want) {
		t.Errorf("GET = %v, want %v", body, want)
	}

	code, body = do(t, s.Handler(), "GET", "/admin/sim", "")
	if models, _ := body["models"].(map[string]any); code != 200 || len(models) != 2 {
		t.Errorf("GET /admin/sim = %d %v, want both models", code, body)
	}
}

func TestAdminPut(t *testing.T) {
	tests := []struct {
		name     string
		model    string
		body     string
		wantCode int
		wantErr  string // error code, "" on success
		check    func(t *testing.T, st Settings)
	}{
		{
			name: "partial update keeps absent fields", model: "sonnet", body: `{"outage":true,"latencyMs":150}`, wantCode: 200,
			check: func(t *testing.T, st Settings) {
				if !st.Outage || st.LatencyMs != 150 || st.TTFTMs != 600 || st.TokensPerSecond != 60 || st.ModelID == "" {
					t.Errorf("settings after PUT: %+v", st)
				}
			},
		},
		{
			name: "errorRate replaces the whole map", model: "sonnet", body: `{"errorRate":{"timeout":0.2}}`, wantCode: 200,
			check: func(t *testing.T, st Settings) {
				if !reflect.DeepEqual(st.ErrorRate, map[provider.Kind]float64{provider.KindTimeout: 0.2}) {
					t.Errorf("errorRate = %v", st.ErrorRate)
				}
			},
		},
		{
			name: "cacheMinTokens", model: "sonnet", body: `{"cacheMinTokens":0}`, wantCode: 200,
			check: func(t *testing.T, st Settings) {
				if st.CacheMinTokens != 0 || st.TTFTMs != 600 {
					t.Errorf("settings after PUT: %+v", st)
				}
			},
		},
		{name: "negative cacheMinTokens", model: "sonnet", body: `{"cacheMinTokens":-1}`, wantCode: 400, wantErr: "invalid_request"},
		{name: "probability out of range", model: "sonnet", body: `{"errorRate":{"throttled":2}}`, wantCode: 400, wantErr: "invalid_request"},
		{name: "sum above one", model: "sonnet", body: `{"errorRate":{"throttled":0.7,"guardrail":0.7}}`, wantCode: 400, wantErr: "invalid_request"},
		{name: "unknown kind", model: "sonnet", body: `{"errorRate":{"boom":0.1}}`, wantCode: 400, wantErr: "invalid_request"},
		{name: "negative", model: "sonnet", body: `{"ttftMs":-5}`, wantCode: 400, wantErr: "invalid_request"},
		{name: "unknown field", model: "sonnet", body: `{"outage":true,"chaos":1}`, wantCode: 400, wantErr: "invalid_request"},
		{name: "wrong type", model: "sonnet", body: `{"outage":"yes"}`, wantCode: 400, wantErr: "invalid_request"},
		{name: "trailing data", model: "sonnet", body: `{"outage":true} {"outage":false}`, wantCode: 400, wantErr: "invalid_request"},
		{name: "not json", model: "sonnet", body: `outage=true`, wantCode: 400, wantErr: "invalid_request"},
		{name: "too large", model: "sonnet", body: `{"modelId":"` + strings.Repeat("x", maxPatchBytes) + `"}`, wantCode: 413, wantErr: "too_large"},
		{name: "unknown model", model: "opus", body: `{"outage":true}`, wantCode: 404, wantErr: "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, 1, DefaultConfig().Models)
			before, _ := s.Settings("sonnet")
			code, body := do(t, s.Handler(), "PUT", "/admin/sim/"+tt.model, tt.body)
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d; body %v", code, tt.wantCode, body)
			}
			after, _ := s.Settings("sonnet")
			if tt.wantErr != "" {
				e, _ := body["error"].(map[string]any)
				if e["code"] != tt.wantErr || e["message"] == "" || e["message"] == nil {
					t.Errorf("error body %v, want code %q and a message", body, tt.wantErr)
				}
				if !reflect.DeepEqual(before, after) {
					t.Errorf("a rejected PUT changed settings: %+v -> %+v", before, after)
				}
				return
			}
			tt.check(t, after)
			var echoed Settings
			raw, _ := json.Marshal(body)
			if err := json.Unmarshal(raw, &echoed); err != nil || !reflect.DeepEqual(echoed, after) {
				t.Errorf("PUT answered %v, want the new settings %+v", body, after)
			}
		})
	}
}

func TestAdminPutTakesEffect(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"haiku": instant})
	h := s.Handler()
	if code, body := do(t, h, "PUT", "/admin/sim/haiku", `{"outage":true}`); code != 200 {
		t.Fatalf("PUT: %d %v", code, body)
	}
	if _, err := s.Complete(context.Background(), userRequest("haiku", "hi")); provider.KindOf(err) != provider.KindUnavailable {
		t.Errorf("after PUT outage: err = %v, want unavailable", err)
	}
	if code, body := do(t, h, "PUT", "/admin/sim/haiku", `{"outage":false}`); code != 200 {
		t.Fatalf("PUT: %d %v", code, body)
	}
	if _, err := s.Complete(context.Background(), userRequest("haiku", "hi")); err != nil {
		t.Errorf("after PUT outage=false: err = %v", err)
	}
}

func TestAdminGetUnknownModel(t *testing.T) {
	s, _ := newSim(t, 1, DefaultConfig().Models)
	code, body := do(t, s.Handler(), "GET", "/admin/sim/opus", "")
	e, _ := body["error"].(map[string]any)
	if code != 404 || e["code"] != "not_found" {
		t.Errorf("GET unknown = %d %v, want 404 not_found", code, body)
	}
}

func FuzzDecodePatch(f *testing.F) {
	f.Add([]byte(`{"outage":true,"errorRate":{"throttled":0.5}}`))
	f.Add([]byte(`{"tpmCeiling":1000,"modelId":"x"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"latencyMs":1e400}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decodePatch(body)
		if err != nil {
			return
		}
		st := p.apply(DefaultConfig().Models["sonnet"])
		if st.Validate() != nil {
			return
		}
		// Anything valid must survive the JSON round trip GET serves.
		b, err := json.Marshal(st.clone())
		if err != nil {
			t.Fatalf("marshal valid settings: %v", err)
		}
		var back Settings
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, st.clone()) {
			t.Fatalf("round trip %+v -> %s -> %+v (%v)", st, b, back, err)
		}
	})
}
