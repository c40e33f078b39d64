package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// joined is every body b kept, one after the other.
func (b *bodies) joined() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(bytes.Join(b.got, []byte("\n")))
}

// With every kind set to redact, no snippet of the PII corpus reaches the
// model's wire: each message is sent through the gateway to a tier on an
// OpenAI-compatible endpoint, and what that endpoint received holds none
// of the personal data, only the placeholders.
func TestNoPersonalDataReachesTheWire(t *testing.T) {
	_, here, _, _ := runtime.Caller(0) // the tests run in a directory of their own
	corpus := filepath.Join(filepath.Dir(here), "..", "guardrail", "testdata", "pii_corpus.tsv")
	cfg := fastConfig()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs, st.TokensPerSecond = 0, 0
		cfg.Sim.Models[name] = st
	}
	cfg.Guardrails = guardrail.Policy{Config: guardrail.Config{Email: guardrail.Redact, Phone: guardrail.Redact, Card: guardrail.Redact,
		MyNumber: guardrail.Redact, PostalCode: guardrail.Redact}}
	up, err := sim.New(cfg.SimConfig(), sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got bodies
	upstream := httptest.NewServer(got.wrap(simserver.Handler(up)))
	t.Cleanup(upstream.Close)
	for i := range cfg.Models {
		cfg.Models[i].Provider = "openai"
		cfg.Models[i].Endpoint = upstream.URL + "/v1"
	}
	_, srv := startServer(t, cfg)

	f, err := os.Open(corpus)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sent := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kinds, text, _ := strings.Cut(sc.Text(), "\t")
		if strings.HasPrefix(kinds, "#") || kinds == "" {
			continue
		}
		body, _ := json.Marshal(map[string]any{"sessionId": fmt.Sprintf("s-pii-%d", sent), "message": text, "locale": "en"})
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-Id", fmt.Sprintf("pii-user-%d", sent))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%q: status %d", text, resp.StatusCode)
		}
		sent++
		wire := got.joined()
		for _, fd := range cfg.Guardrails.Check(text).Findings {
			raw := text[fd.Start:fd.End]
			if quoted, _ := json.Marshal(raw); strings.Contains(wire, raw) || strings.Contains(wire, string(quoted[1:len(quoted)-1])) {
				t.Errorf("%s %q of %q reached the model's endpoint", fd.Kind, raw, text)
			}
		}
	}
	if sent < 50 {
		t.Fatalf("sent %d snippets with personal data; want the corpus's", sent)
	}
	if wire := got.joined(); !strings.Contains(wire, "[CARD]") || !strings.Contains(wire, "[EMAIL]") {
		t.Error("the endpoint saw no placeholders: were the messages sent at all?")
	}
}
