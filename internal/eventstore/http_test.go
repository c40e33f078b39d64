package eventstore

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	s := openTest(t, ":memory:")
	write(t, s, dataset...)
	h := s.Handler()
	tests := []struct {
		name     string
		method   string
		target   string
		body     string
		wantCode int
		wantIn   string
	}{
		{"cost per feature", "GET", "/admin/cost?by=feature&from=2026-04-29T14:00:00Z&to=-1m", "", 200, `"key":"recommend"`},
		{"default range is the last 24h", "GET", "/admin/cost", "", 200, `"spans":12`},
		{"versions combined", "GET", "/admin/cost?by=user&graph=v17.4&prompt=planner-prompt-v23&model=sonnet", "", 200, `"key":"alice"`},
		{"nodes of a trace", "GET", "/admin/cost?by=node&trace=" + traceID(0), "", 200, `"name":"tool"`},
		{"top users", "GET", "/admin/cost/top-users?limit=1", "", 200, `"key":"alice"`},
		{"anomalies", "GET", "/admin/cost/anomalies?from=-2h", "", 200, `"turns":5`},
		{"rising", "GET", "/admin/cost/rising?periods=2", "", 200, `"features":[]`},
		{"eval by prompt", "GET", "/admin/eval?by=prompt", "", 200, `"rows":[]`},
		{"set eval", "POST", "/admin/eval", `{"traceId":"` + traceID(0) + `","score":0.9}`, 200, `"score":0.9`},
		{"set eval unknown trace", "POST", "/admin/eval", `{"traceId":"` + traceID(77) + `","score":0.9}`, 404, `"code":"not_found"`},
		{"unknown by", "GET", "/admin/cost?by=colour", "", 400, `unknown grouping`},
		{"unknown parameter", "GET", "/admin/cost?modle=sonnet", "", 400, `unknown parameter`},
		{"repeated parameter", "GET", "/admin/cost?by=user&by=feature", "", 400, `more than once`},
		{"bad from", "GET", "/admin/cost?from=yesterday", "", 400, `from: not RFC 3339`},
		{"from after to", "GET", "/admin/cost?from=-1h&to=-2h", "", 400, `from must be before to`},
		{"limit zero", "GET", "/admin/cost?limit=0", "", 400, `limit: must be`},
		{"limit not a number", "GET", "/admin/cost?limit=ten", "", 400, `limit: must be`},
		{"node without trace", "GET", "/admin/cost?by=node", "", 400, `needs a trace`},
		{"filter with a NUL", "GET", "/admin/cost?by=feature&feature=re%00commend", "", 400, `feature must be UTF-8 text without NUL`},
		{"filter not UTF-8", "GET", "/admin/cost?by=user&model=%ff", "", 400, `model must be UTF-8 text without NUL`},
		{"filter too long", "GET", "/admin/cost?by=user&prompt=" + strings.Repeat("p", 257), "", 400, `prompt must be at most 256 bytes`},
		{"compare version with a NUL", "GET", "/admin/cost/compare?dim=model&a=son%00net&b=haiku", "", 400, `a must be UTF-8 text without NUL`},
		{"huge duration", "GET", "/admin/cost?from=-999999h", "", 400, `out of range`},
		{"periods zero", "GET", "/admin/cost/rising?periods=0", "", 400, `periods must be`},
		{"eval by user is not an eval grouping", "GET", "/admin/eval?by=user", "", 400, `unknown eval grouping`},
		{"eval body without score", "POST", "/admin/eval", `{"traceId":"` + traceID(0) + `"}`, 400, `score: required`},
		{"eval body with bad id", "POST", "/admin/eval", `{"spanId":"XYZ","score":1}`, 400, `spanId: must be`},
		{"eval body unknown field", "POST", "/admin/eval", `{"trace":"x","score":1}`, 400, `unknown field`},
		{"eval body not json", "POST", "/admin/eval", `score=1`, 400, `invalid_request`},
		{"series", "GET", "/admin/cost/series?from=2026-04-29T14:00:00Z&to=2026-04-29T14:02:00Z&step=1m", "", 200,
			`"stepSeconds":60,"points":[{"t":"2026-04-29T14:00:00Z","turns":4,"spans":10,"errors":1,"fallbacks":0,"tokensIn":600,"tokensOut":60,`},
		{"series default step", "GET", "/admin/cost/series?from=-24h&model=haiku", "", 200, `"stepSeconds":600`},
		{"series sub-minute step", "GET", "/admin/cost/series?step=30s", "", 400, `step must be a whole number of minutes`},
		{"series step not a duration", "GET", "/admin/cost/series?step=soon", "", 400, `step: not a positive duration`},
		{"series negative step", "GET", "/admin/cost/series?step=-5m", "", 400, `step: not a positive duration`},
		{"series step twice", "GET", "/admin/cost/series?step=1m&step=5m", "", 400, `step: given more than once`},
		{"series grouping", "GET", "/admin/cost/series?by=feature", "", 400, `unknown parameter \"by\"`},
		{"compare", "GET", "/admin/cost/compare?dim=prompt&a=planner-prompt-v23&b=planner-prompt-v24", "", 200,
			`"b":{"version":"planner-prompt-v24","turns":1,"errors":0,"errorRate":0,`},
		{"compare without dim", "GET", "/admin/cost/compare?a=x&b=y", "", 400, `dim: required`},
		{"compare tool dim", "GET", "/admin/cost/compare?dim=tool&a=x&b=y", "", 400, `dim must be prompt, graph or model`},
		{"compare without b", "GET", "/admin/cost/compare?dim=model&a=sonnet", "", 400, `b: required`},
		{"compare empty a", "GET", "/admin/cost/compare?dim=model&a=&b=haiku", "", 400, `a: required`},
		{"compare bad range", "GET", "/admin/cost/compare?dim=model&a=x&b=y&from=-1h&to=-2h", "", 400, `from must be before to`},
		{"versions", "GET", "/admin/cost/versions", "", 200, `"tool":[{"version":"search","spans":1,"firstSeen":"2026-04-29T14:00:00.002Z"`},
		{"versions bad to", "GET", "/admin/cost/versions?to=later", "", 400, `to: not RFC 3339`},
		{"trace", "GET", "/admin/cost/trace/" + traceID(0), "", 200, `{"traceId":"` + traceID(0) + `","spans":[{"schema_version":3,`},
		{"trace unknown", "GET", "/admin/cost/trace/" + traceID(77), "", 404, `"code":"not_found"`},
		{"trace malformed", "GET", "/admin/cost/trace/xyz", "", 400, `trace id must be 32 lowercase hex digits`},
		{"trace with a parameter", "GET", "/admin/cost/trace/" + traceID(0) + "?from=-1h", "", 400, `unknown parameter`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.target, strings.NewReader(tt.body))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode || !strings.Contains(rec.Body.String(), tt.wantIn) {
				t.Fatalf("%s %s = %d %s; want %d containing %s", tt.method, tt.target, rec.Code, rec.Body, tt.wantCode, tt.wantIn)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if rec.Code == 400 {
				var e struct {
					Error struct{ Code, Message string } `json:"error"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code != "invalid_request" || e.Error.Message == "" {
					t.Errorf("400 body = %s", rec.Body)
				}
			}
		})
	}
	// The score set above is now visible to the eval view.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/eval?by=model&graph=v17.4", nil))
	if !strings.Contains(rec.Body.String(), `"key":"sonnet","turns":1,"avgScore":0.9`) {
		t.Errorf("eval after POST = %s", rec.Body)
	}
}

// A query whose client has gone (the dashboard moved on to another view)
// is not the store's fault: it is logged at debug level, not as an error,
// while a query that fails for the store's own reasons still is.
func TestHandlerClientGoneIsNotAnError(t *testing.T) {
	s := openTest(t, ":memory:")
	write(t, s, dataset...)
	var logs bytes.Buffer
	s.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h := s.Handler()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/admin/cost?by=feature", nil).WithContext(ctx))
	if logs.Len() != 0 {
		t.Fatalf("cancelled query logged: %s", logs.String())
	}

	s.r.Close() // every later query fails inside the store
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/cost?by=feature", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("store failure = %d, logs %q; want 500 and an ERROR line", rec.Code, logs.String())
	}
}

func FuzzParseEvalBody(f *testing.F) {
	f.Add([]byte(`{"traceId":"0123456789abcdef0123456789abcdef","score":0.5}`))
	f.Add([]byte(`{"spanId":"0123456789abcdef","score":1e308}`))
	f.Add([]byte(`{"score":NaN}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, _, err := parseEvalBody(b)
		if err == nil && len(id) != 16 && len(id) != 32 && len(id) != 48 {
			t.Fatalf("accepted id %q", id)
		}
	})
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"-1h", "2026-04-29T14:02:13.418Z", "now", "+5m", "-9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parseTime(s, t0)
	})
}
