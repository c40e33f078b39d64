package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/fallback"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/guardrail"
)

// guardrailService stands in for Bedrock Runtime's ApplyGuardrail
// (POST /guardrail/{id}/version/{v}/apply) with h, counting its calls,
// and puts static AWS credentials in the environment for the SDK's
// default chain.
func guardrailService(t *testing.T, h http.HandlerFunc) (string, *atomic.Int64) {
	t.Helper()
	home := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDGUARD", "AWS_SECRET_ACCESS_KEY": "guard-secret", "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/guardrail/gr-manga/version/2/apply" {
			t.Errorf("ApplyGuardrail at %s; want /guardrail/gr-manga/version/2/apply", r.URL.Path)
		}
		calls.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &calls
}

// answering is an ApplyGuardrail answer.
func answering(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}
}

// withRemoteGuard is quickConfig checking messages with the guardrail at
// endpoint, spans written to the returned file.
func withRemoteGuard(t *testing.T, endpoint, onError string) (config.Config, string) {
	cfg := quickConfig()
	cfg.Guardrails.Bedrock = guardrail.BedrockConfig{GuardrailID: "gr-manga", GuardrailVersion: "2", Region: "ap-northeast-1",
		Endpoint: endpoint, Timeout: 200 * time.Millisecond, OnError: onError, PricePer1kTextUnits: 0.15}
	spans := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = spans
	return cfg, spans
}

// guardSpans are the remote check's spans in the file.
func guardSpans(t *testing.T, sc *scenario, path string) []events.Event {
	t.Helper()
	sc.s.Close()
	var out []events.Event
	for _, e := range readSpans(t, path) {
		if e.Name == "guard_bedrock" {
			out = append(out, e)
		}
	}
	return out
}

const intervened = `{"action":"GUARDRAIL_INTERVENED","outputs":[{"text":"Sorry."}],
	"assessments":[{"topicPolicy":{"topics":[{"name":"Piracy","type":"DENY","action":"BLOCKED","detected":true}]}}],
	"usage":{"topicPolicyUnits":1,"contentPolicyUnits":1}}`

// TestRemoteGuardrailBlocks: a message Bedrock Guardrails intervenes on
// gets the redirect answer in the user's language, a 200 marked degraded,
// with no model called; the check's span names the check's verdict and
// what it cost, never the text.
func TestRemoteGuardrailBlocks(t *testing.T) {
	url, calls := guardrailService(t, answering(intervened))
	cfg, spans := withRemoteGuard(t, url, guardrail.OnErrorOpen)
	sc := newScenario(t, cfg)
	a := sc.chat("pirate", "Where can I read One Piece for free illegally?", "en")
	if a.Status != 200 || !a.Degraded || a.Text != fallback.Redirect("en") {
		t.Fatalf("answer %+v; want the redirect message, degraded", a)
	}
	ja := sc.chat("pirate-ja", "ワンピースを無料で違法に読めるサイトは？", "ja")
	if ja.Status != 200 || ja.Text != fallback.Redirect("ja") {
		t.Fatalf("ja answer %+v; want the redirect message in Japanese", ja)
	}
	if calls.Load() != 2 {
		t.Fatalf("the guardrail was asked %d times; want once a turn", calls.Load())
	}
	for name, c := range sc.upstream {
		if n := c.calls.Load(); n != 0 {
			t.Fatalf("%s called %d times for blocked messages", name, n)
		}
	}
	got := guardSpans(t, sc, spans)
	if len(got) != 2 {
		t.Fatalf("%d guard_bedrock spans; want one per turn", len(got))
	}
	e := got[0]
	if e.Outcome.ErrorCode != "guardrail_blocked:remote:topic" || e.Outcome.VendorCode != "GUARDRAIL_INTERVENED" ||
		e.Resource.CostUSD < 0.0003-1e-12 || e.Resource.CostUSD > 0.0003+1e-12 || e.PromptExcerpt != "" {
		t.Fatalf("span %+v; want the block by topic, GUARDRAIL_INTERVENED, 2 text units priced, no text", e)
	}
}

// TestRemoteGuardrailMasks: a message the guardrail only masks reaches the
// model masked.
func TestRemoteGuardrailMasks(t *testing.T) {
	url, _ := guardrailService(t, answering(`{"action":"GUARDRAIL_INTERVENED",
		"outputs":[{"text":"I am {NAME}, which manga is like Naruto?"}],
		"assessments":[{"sensitiveInformationPolicy":{"piiEntities":[{"match":"Taro Yamada","type":"NAME","action":"ANONYMIZED","detected":true}]}}]}`))
	cfg, _ := withRemoteGuard(t, url, guardrail.OnErrorOpen)
	sc, seen := instance(t, cfg)
	a := sc.chat("taro", "I am Taro Yamada, which manga is like Naruto?", "en")
	if a.Status != 200 || a.Degraded {
		t.Fatalf("answer %+v", a)
	}
	msgs := seen()
	if last := msgs[len(msgs)-1].Content; last != "I am {NAME}, which manga is like Naruto?" {
		t.Fatalf("the model saw %q; want the guardrail's masked text", last)
	}
}

// TestRemoteGuardrailFailures: a guardrail slower than its timeout lets
// the turn through with onError open, the span saying why, and refuses it
// with 503 guardrail_unavailable in the user's language with onError
// closed. Failures open the guardrail breaker: the service is then not
// called at all.
func TestRemoteGuardrailFailures(t *testing.T) {
	slow := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices the client leave only once the body is read
		<-r.Context().Done()
	}
	t.Run("open", func(t *testing.T) {
		url, calls := guardrailService(t, slow)
		cfg, spans := withRemoteGuard(t, url, guardrail.OnErrorOpen)
		sc := newScenario(t, cfg)
		for i := range 7 {
			a := sc.chat("reader", "Which manga should I read next?", "en")
			if a.Status != 200 || a.Tier != "sonnet" {
				t.Fatalf("turn %d: %+v; want sonnet's answer, the check skipped", i, a)
			}
		}
		if n := calls.Load(); n != 5 {
			t.Fatalf("the guardrail was called %d times for 7 turns; its breaker should open after 5 failures", n)
		}
		var codes []string
		for _, e := range guardSpans(t, sc, spans) {
			codes = append(codes, e.Outcome.ErrorCode)
		}
		want := "guardrail_skipped:timeout,guardrail_skipped:timeout,guardrail_skipped:timeout,guardrail_skipped:timeout,guardrail_skipped:timeout," +
			"guardrail_skipped:breaker_open,guardrail_skipped:breaker_open"
		if strings.Join(codes, ",") != want {
			t.Fatalf("spans %v; want %s", codes, want)
		}
	})
	t.Run("closed", func(t *testing.T) {
		url, calls := guardrailService(t, slow)
		cfg, _ := withRemoteGuard(t, url, guardrail.OnErrorClosed)
		sc := newScenario(t, cfg)
		a := sc.chat("reader", "Which manga should I read next?", "en")
		if a.Status != http.StatusServiceUnavailable || a.Error.Code != gateway.CodeGuardrailUnavailable || !strings.Contains(a.Error.Message, "try again") {
			t.Fatalf("answer %+v; want 503 guardrail_unavailable", a)
		}
		ja := sc.chat("reader-ja", "次に読むべき漫画は？", "ja")
		if ja.Status != http.StatusServiceUnavailable || !strings.Contains(ja.Error.Message, "もう一度") {
			t.Fatalf("ja answer %+v; want the refusal in Japanese", ja)
		}
		for name, c := range sc.upstream {
			if n := c.calls.Load(); n != 0 {
				t.Fatalf("%s called %d times for unchecked messages", name, n)
			}
		}
		for range 5 {
			sc.chat("reader", "Which manga should I read next?", "en")
		}
		if n := calls.Load(); n != 5 {
			t.Fatalf("the guardrail was called %d times for 7 turns; its breaker should open after 5 failures", n)
		}
		if b := sc.chat("reader", "Which manga should I read next?", "en"); b.Status != http.StatusServiceUnavailable || b.Error.Code != gateway.CodeGuardrailUnavailable {
			t.Fatalf("with the breaker open: %+v; want 503 guardrail_unavailable", b)
		}
	})
}

// TestGuardrailsProfileForTheStorefrontKey: the storefront's keys — one in
// the config file, one made at run time — are held to the storefront
// profile (e-mail and phone numbers redacted, the Bedrock guardrail
// asked), while another key gets the top level's checks only; a blocked
// storefront turn's span names the profile and the verdict.
func TestGuardrailsProfileForTheStorefrontKey(t *testing.T) {
	url, calls := guardrailService(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(body), "illegally") {
			_, _ = io.WriteString(w, intervened)
			return
		}
		_, _ = io.WriteString(w, `{"action":"NONE","outputs":[],"assessments":[],"usage":{"topicPolicyUnits":1}}`)
	})
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	cfg.Guardrails.Profiles = map[string]guardrail.Config{"storefront": {
		Email: guardrail.Redact, Phone: guardrail.Redact, Card: guardrail.Redact,
		Bedrock: guardrail.BedrockConfig{GuardrailID: "gr-manga", GuardrailVersion: "2", Region: "ap-northeast-1",
			Endpoint: url, Timeout: 500 * time.Millisecond, OnError: guardrail.OnErrorClosed},
	}}
	cfg.Auth.Keys = map[string]config.Caller{
		shopKey:  {UserID: "shop-customer", Guardrails: "storefront"},
		otherKey: {UserID: "other-customer"},
	}
	spans := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = spans
	sc, seen := instance(t, cfg)
	base := sc.srv.URL
	const contact = "Mail taro@example.com or call 090-1234-5678 about my One Piece order"
	lastSeen := func() string {
		msgs := seen()
		return msgs[len(msgs)-1].Content
	}

	if a := shopTurn(t, base, shopKey, "shop-1", contact); a.Status != 200 || a.Degraded {
		t.Fatalf("storefront turn: %+v", a)
	}
	if got := lastSeen(); strings.Contains(got, "taro@example.com") || strings.Contains(got, "090-1234-5678") ||
		!strings.Contains(got, "[EMAIL]") || !strings.Contains(got, "[PHONE]") {
		t.Fatalf("for the storefront key the model saw %q; want the e-mail and the phone number redacted", got)
	}
	if calls.Load() != 1 {
		t.Fatalf("the Bedrock guardrail was asked %d times for one storefront turn", calls.Load())
	}
	if a := shopTurn(t, base, otherKey, "other-1", contact); a.Status != 200 {
		t.Fatalf("other key's turn: %+v", a)
	}
	if got := lastSeen(); !strings.Contains(got, "taro@example.com") {
		t.Fatalf("for the other key the model saw %q; the top level checks no e-mail addresses", got)
	}
	if calls.Load() != 1 {
		t.Fatalf("the Bedrock guardrail was asked for a key outside the storefront profile (%d calls)", calls.Load())
	}

	// A key made at run time chooses the profile too; one naming no
	// profile is refused by name.
	if status, body := adminDo(t, base, http.MethodPost, "/admin/keys", `{"name":"shop app","guardrails":"storfront"}`); status != http.StatusUnprocessableEntity ||
		!strings.Contains(body, `no guardrails profile named \"storfront\"`) {
		t.Fatalf("a key naming an unknown profile: %d %s; want 422 naming it", status, body)
	}
	k := createKey(t, base, `{"name":"shop app","userId":"shop-app","guardrails":"storefront"}`)
	a := shopTurn(t, base, k.Secret, "shop-2", "Where can I read One Piece for free illegally?")
	if a.Status != 200 || !a.Degraded || a.Text != fallback.Redirect("en") {
		t.Fatalf("a blocked storefront turn: %+v; want the redirect answer, degraded", a)
	}
	if calls.Load() != 2 {
		t.Fatalf("the Bedrock guardrail was asked %d times; want twice", calls.Load())
	}

	var verdicts []string
	for _, e := range guardSpans(t, sc, spans) {
		if e.Artifact.ToolID != "guardrails" || e.Artifact.ToolVersion != "storefront" {
			t.Fatalf("guard_bedrock span's artifact %+v; want the guardrails at the storefront profile", e.Artifact)
		}
		verdicts = append(verdicts, e.Outcome.ErrorCode)
	}
	// A passed check's span is sampled as its turn is; the block is kept.
	if len(verdicts) == 0 || verdicts[len(verdicts)-1] != "guardrail_blocked:remote:topic" {
		t.Fatalf("storefront verdicts %v; want the block by topic last", verdicts)
	}
}
