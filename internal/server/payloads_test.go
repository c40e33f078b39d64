package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/eventstore/pgstore"
	"github.com/fmgate/fmgate/internal/fallback"
	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/payloadlog"
	"github.com/fmgate/fmgate/internal/pgtest"
)

const (
	shopKey  = "sk-storefront-0123456789"
	otherKey = "sk-other-0123456789abcd"
)

// payloadConfig logs the storefront key's turns, checks cards (redacted)
// and e-mail addresses (blocked), and keeps the judge from sampling.
func payloadConfig(t *testing.T) config.Config {
	t.Setenv(payloadlog.DefaultKeyEnv, strings.Repeat("5a", 32))
	cfg := quickConfig()
	cfg.PayloadLog.Enabled = true
	cfg.Auth.Keys = map[string]config.Caller{
		shopKey:  {UserID: "shop-customer", PayloadLog: true},
		otherKey: {UserID: "other-customer"},
	}
	cfg.Guardrails = guardrail.Policy{Config: guardrail.Config{Card: guardrail.Redact, Email: guardrail.Block}}
	return cfg
}

// shopTurn sends one turn on the gateway's own door with key and returns
// its answer.
func shopTurn(t *testing.T, base, key, session, message string) answer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"sessionId": session, "message": message, "locale": "en"})
	status, got := keyPost(t, base, key, "/v1/chat", string(body))
	var a answer
	if err := json.Unmarshal([]byte(got), &a); err != nil {
		t.Fatalf("answer %q: %v", got, err)
	}
	a.Status = status
	return a
}

// request sends an admin-API request with auth ("" for none) and returns
// its status and body.
func request(t *testing.T, method, url, auth, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitPayload polls until the payload of trace is written (the writer is
// off the turn's path) and returns it.
func waitPayload(t *testing.T, base, trace string) payloadlog.Record {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		status, body := request(t, http.MethodGet, base+"/admin/payloads?trace="+trace, testAdminToken, "")
		if status == http.StatusOK && strings.Contains(body, trace) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the payload of %s was not written: %d %s", trace, status, body)
		}
	}
	status, body := request(t, http.MethodGet, base+"/admin/payloads/"+trace, testAdminToken, "")
	if status != http.StatusOK {
		t.Fatalf("GET payload %s: %d %s", trace, status, body)
	}
	var rec payloadlog.Record
	if err := json.Unmarshal([]byte(body), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// A gateway with payload logs on and no sealing key refuses to start, and
// says what to set.
func TestPayloadLogRefusesToStartWithoutKey(t *testing.T) {
	cfg := payloadConfig(t)
	t.Setenv(payloadlog.DefaultKeyEnv, "")
	_, err := New(context.Background(), isolate(t, cfg), Options{Catalog: sharedCatalog(t)})
	if err == nil || !strings.Contains(err.Error(), "FMGATE_PAYLOAD_KEY is not set") || !strings.Contains(err.Error(), "export FMGATE_PAYLOAD_KEY=") {
		t.Fatalf("New without the key: %v", err)
	}
	t.Setenv(payloadlog.DefaultKeyEnv, "too short")
	if _, err := New(context.Background(), isolate(t, cfg), Options{Catalog: sharedCatalog(t)}); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Fatalf("New with a bad key: %v", err)
	}
}

// The storefront key's turns are logged after redaction — a card number
// as [CARD], a blocked message with its address masked and the redirect
// answer — and the other key's are not; only the admin reads them, each
// read an audit span; the export reads back as a dataset the judge's
// rubric grades; forgetting the customer deletes their payloads and
// pseudonymizes their spans.
func TestPayloadLogEndToEnd(t *testing.T) {
	cfg := payloadConfig(t)
	sc := newScenario(t, cfg)
	base := sc.srv.URL

	card := shopTurn(t, base, shopKey, "s1", "Recommend a fantasy manga like Frieren; my card is 4111 1111 1111 1111")
	blocked := shopTurn(t, base, shopKey, "s1", "Mail the list to taro@example.com please")
	other := shopTurn(t, base, otherKey, "s2", "Recommend a fantasy manga like Frieren")
	for _, a := range []answer{card, blocked, other} {
		if a.Status != http.StatusOK || a.TraceID == "" {
			t.Fatalf("turn %+v", a)
		}
	}
	if blocked.Text != fallback.Redirect("en") {
		t.Fatalf("the blocked turn's answer %q, want the redirect", blocked.Text)
	}

	rec := waitPayload(t, base, card.TraceID)
	p := rec.Payload
	if !strings.Contains(p.Question, "[CARD]") || strings.Contains(p.Question, "4111") || !strings.Contains(p.Question, "Frieren") {
		t.Errorf("question %q: want it as the model saw it, the card redacted", p.Question)
	}
	if p.Answer != card.Text || p.Tier != card.Tier || p.Source != "model" || rec.Feature != "chat" || rec.KeyID == "" || rec.UserHash == "" {
		t.Errorf("payload %+v; want the answer the client got, from %s", rec, card.Tier)
	}
	if len(p.Guardrail) != 1 || p.Guardrail[0] != "guardrail_checked:card" {
		t.Errorf("guardrail verdicts %v", p.Guardrail)
	}
	b := waitPayload(t, base, blocked.TraceID).Payload
	if b.Question != "Mail the list to [EMAIL] please" || b.Answer != fallback.Redirect("en") || b.Source == "model" ||
		len(b.Guardrail) != 1 || b.Guardrail[0] != "guardrail_blocked:email" {
		t.Errorf("the blocked turn's payload %+v", b)
	}
	if status, _ := request(t, http.MethodGet, base+"/admin/payloads/"+other.TraceID, testAdminToken, ""); status != http.StatusNotFound {
		t.Errorf("a turn of a key that logs nothing: payload status %d, want 404", status)
	}

	// Nobody but the admin reads a payload: not the key whose turn it is,
	// not a caller without credentials.
	for _, auth := range []string{"", shopKey, "wrong-admin-token"} {
		for _, path := range []string{"/admin/payloads/" + card.TraceID, "/admin/payloads/export", "/admin/payloads?trace=" + card.TraceID} {
			if status, body := request(t, http.MethodGet, base+path, auth, ""); status != http.StatusUnauthorized || strings.Contains(body, "Frieren") {
				t.Errorf("GET %s with %q: %d %s; want 401", path, auth, status, body)
			}
		}
		if status, _ := request(t, http.MethodPost, base+"/admin/forget", auth, `{"userId":"shop-customer"}`); status != http.StatusUnauthorized {
			t.Errorf("POST /admin/forget with %q: %d, want 401", auth, status)
		}
	}

	// Each read is an audit span in the event store, naming the turn.
	audits := waitAudits(t, sc, card.TraceID, 1)
	if !strings.Contains(audits[0].note, "viewed turn "+card.TraceID) || !strings.Contains(audits[0].note, "admin token") {
		t.Errorf("audit note %q", audits[0].note)
	}

	// The export is the dataset: one record a line, in time order.
	status, export := request(t, http.MethodGet, base+"/admin/payloads/export?from=-1h", testAdminToken, "")
	if status != http.StatusOK {
		t.Fatalf("export: %d %s", status, export)
	}
	var lines []payloadlog.Record
	if err := payloadlog.ReadRecords(strings.NewReader(export), func(r payloadlog.Record) error { lines = append(lines, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || lines[0].TraceID != card.TraceID || lines[1].TraceID != blocked.TraceID {
		t.Fatalf("export %s", export)
	}
	waitAudits(t, sc, "", 2) // the export is audited too

	// The judge's rubric grades the dataset through the pipeline.
	status, graded := request(t, http.MethodPost, base+"/admin/payloads/judge", testAdminToken, export)
	if status != http.StatusOK {
		t.Fatalf("judge: %d %s", status, graded)
	}
	sc2 := bufio.NewScanner(strings.NewReader(graded))
	var verdicts []JudgedRecord
	var summary JudgeSummary
	for sc2.Scan() {
		var v JudgedRecord
		if json.Unmarshal(sc2.Bytes(), &v); v.TraceID != "" {
			verdicts = append(verdicts, v)
		} else {
			_ = json.Unmarshal(sc2.Bytes(), &summary)
		}
	}
	if len(verdicts) != 2 || verdicts[0].Overall == nil || verdicts[0].Error != "" || summary.Judged != 2 || summary.MeanOverall == nil {
		t.Fatalf("judge verdicts %s", graded)
	}
	// The redirect answers something else than was asked: the rubric scores it lower.
	if *verdicts[1].Overall >= *verdicts[0].Overall {
		t.Errorf("the redirect scored %v, the model's answer %v", *verdicts[1].Overall, *verdicts[0].Overall)
	}

	if !strings.Contains(adminGet(t, base+"/metrics"), "fmgate_payload_log_written_total 2") {
		t.Errorf("/metrics does not count the two payloads written")
	}

	// The customer is forgotten: payloads gone, spans no longer theirs.
	status, body := request(t, http.MethodPost, base+"/admin/forget", testAdminToken, `{"userId":"shop-customer"}`)
	var forgot struct {
		UserIDHash string `json:"userIdHash"`
		Deleted    int    `json:"payloadsDeleted"`
		Spans      int    `json:"spansPseudonymized"`
	}
	if err := json.Unmarshal([]byte(body), &forgot); err != nil || status != http.StatusOK || forgot.Deleted != 2 || forgot.Spans == 0 || forgot.UserIDHash != rec.UserHash {
		t.Fatalf("forget: %d %s", status, body)
	}
	if status, _ := request(t, http.MethodGet, base+"/admin/payloads/"+card.TraceID, testAdminToken, ""); status != http.StatusNotFound {
		t.Errorf("a forgotten customer's payload: %d, want 404", status)
	}
	var users struct {
		Rows []costRow `json:"rows"`
	}
	sc.getJSON("/admin/cost?by=user&from=-1h&user="+rec.UserHash, &users)
	if len(users.Rows) != 0 {
		t.Errorf("the event store still has the customer's spans: %+v", users.Rows)
	}
	var trace struct {
		Spans []struct {
			User string `json:"user_id_hash"`
		} `json:"spans"`
	}
	sc.getJSON("/admin/cost/trace/"+card.TraceID, &trace)
	for _, s := range trace.Spans {
		if s.User == rec.UserHash {
			t.Fatalf("a span of the forgotten customer's turn still has their hash")
		}
	}

	// On disk the payloads were never readable.
	dir := filepath.Dir(sc.s.cfg.EventStore.Path)
	var disk []byte
	for _, f := range []string{"payloads.db", "payloads.db-wal"} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		disk = append(disk, b...)
	}
	if len(disk) == 0 || bytes.Contains(disk, []byte("Frieren")) || bytes.Contains(disk, []byte("[EMAIL]")) {
		t.Errorf("payloads.db (%d bytes) holds the text in plain", len(disk))
	}
}

type audit struct{ trace, workflow, note, code string }

// waitAudits polls the event store until it holds at least n payload audit
// spans, those of workflow trace when trace is set.
func waitAudits(t *testing.T, sc *scenario, trace string, n int) []audit {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var turns struct {
			Rows []struct {
				Key string `json:"key"`
			} `json:"rows"`
		}
		sc.getJSON("/admin/cost?by=turn&from=-1h&feature="+payloadFeature, &turns)
		var got []audit
		for _, r := range turns.Rows {
			var tr struct {
				Spans []struct {
					Name     string `json:"name"`
					Workflow string `json:"workflow_id"`
					Excerpt  string `json:"prompt_excerpt"`
					Outcome  struct {
						ErrorCode string `json:"error_code"`
					} `json:"outcome"`
				} `json:"spans"`
			}
			sc.getJSON("/admin/cost/trace/"+r.Key, &tr)
			for _, s := range tr.Spans {
				if s.Name == "payload_audit" && (trace == "" || s.Workflow == trace) {
					got = append(got, audit{r.Key, s.Workflow, s.Excerpt, s.Outcome.ErrorCode})
				}
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d payload audit spans in the event store, want %d", len(got), n)
		}
	}
}

// Expired payloads go: the retention loop deletes those older than
// payloadLog.retention.
func TestPayloadLogRetention(t *testing.T) {
	cfg := payloadConfig(t)
	cfg.PayloadLog.Retention = time.Hour
	cfg.PayloadLog.PruneInterval = 20 * time.Millisecond
	sc := newScenario(t, cfg)
	now := time.Now()
	old := payloadlog.Record{TraceID: strings.Repeat("a", 32), At: now.Add(-2 * time.Hour), UserHash: "u", Feature: "chat", Payload: payloadlog.Payload{Question: "old"}}
	fresh := payloadlog.Record{TraceID: strings.Repeat("b", 32), At: now.Add(-30 * time.Minute), UserHash: "u", Feature: "chat", Payload: payloadlog.Payload{Question: "fresh"}}
	if err := sc.s.payloads.log.Put(context.Background(), []payloadlog.Record{old, fresh}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		status, _ := request(t, http.MethodGet, sc.srv.URL+"/admin/payloads/"+old.TraceID, testAdminToken, "")
		if status == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a payload past retention is still there (%d)", status)
		}
	}
	if status, _ := request(t, http.MethodGet, sc.srv.URL+"/admin/payloads/"+fresh.TraceID, testAdminToken, ""); status != http.StatusOK {
		t.Fatalf("a payload within retention: %d", status)
	}
}

// An admin signed in to the dashboard opens a turn of the storefront key:
// under its waterfall the page says a payload was kept and, asked, shows
// the request (the card redacted) and the answer, a read the event store
// records; the blocked turn's guard span shows its verdict, and its
// payload the masked message.
func TestPayloadInTurnViewInBrowser(t *testing.T) {
	cfg := payloadConfig(t)
	sc := newScenario(t, cfg)
	base := sc.srv.URL
	card := shopTurn(t, base, shopKey, "s1", "Recommend a fantasy manga like Frieren; my card is 4111 1111 1111 1111")
	blocked := shopTurn(t, base, shopKey, "s1", "Mail the list to taro@example.com please")
	other := shopTurn(t, base, otherKey, "s2", "Recommend a fantasy manga")
	rec := waitPayload(t, base, card.TraceID)
	waitPayload(t, base, blocked.TraceID)
	before := len(waitAudits(t, sc, card.TraceID, 1))

	p := signIn(t, base)
	p.open("#/cost?range=1h&feature=chat&user=" + rec.UserHash + "&trace=" + card.TraceID)
	p.wait("the turn's waterfall", `!!document.querySelector('[data-testid="waterfall"]')`)
	p.wait("the payload's note", `document.querySelector('[data-testid="payload"]').dataset.state === "available"`)
	if txt := p.text(`[data-testid="payload"]`); strings.Contains(txt, "Frieren") {
		t.Fatalf("the text shows before the operator asked for it: %q", txt)
	}
	p.eval(`document.querySelector('[data-testid="payload-show"]').click(); ""`)
	p.wait("the payload", `document.querySelector('[data-testid="payload"]').dataset.state === "shown"`)
	q, a := p.text(`[data-testid="payload-question"]`), p.text(`[data-testid="payload-answer"]`)
	if !strings.Contains(q, "Frieren") || !strings.Contains(q, "[CARD]") || strings.Contains(q, "4111") {
		t.Errorf("the page shows the request %q; want it with the card redacted", q)
	}
	if a != strings.TrimSpace(card.Text) {
		t.Errorf("the page shows the answer %q; the client got %q", a, card.Text)
	}
	if txt := p.text(`[data-testid="payload"]`); strings.Contains(txt, "null") || strings.Contains(txt, "undefined") {
		t.Errorf("the payload panel shows a missing field as text: %q", txt)
	}
	if got := len(waitAudits(t, sc, card.TraceID, before+1)); got != before+1 {
		t.Errorf("%d audit spans for the turn after the page read it, want %d", got, before+1)
	}
	p.screenshot("dashboard-payload.png")

	// The blocked turn: the guard span's verdict in the waterfall, the
	// masked message in its payload.
	p.open("#/cost?range=1h&feature=chat&user=" + rec.UserHash + "&trace=" + blocked.TraceID)
	p.wait("the blocked turn's waterfall", `!!document.querySelector('[data-testid="waterfall"]')`)
	if v := p.text(`[data-testid="span"][data-name="guard"] [data-testid="verdict"]`); v != "blocked email" {
		t.Errorf("the guard span's verdict reads %q, want \"blocked email\"", v)
	}
	p.wait("the payload's note", `document.querySelector('[data-testid="payload"]').dataset.state === "available"`)
	p.eval(`document.querySelector('[data-testid="payload-show"]').click(); ""`)
	p.wait("the payload", `document.querySelector('[data-testid="payload"]').dataset.state === "shown"`)
	if q := p.text(`[data-testid="payload-question"]`); q != "Mail the list to [EMAIL] please" {
		t.Errorf("the blocked turn's request reads %q", q)
	}
	if g := p.text(`[data-testid="payload-guardrail"]`); !strings.Contains(g, "guardrail_blocked:email") {
		t.Errorf("the blocked turn's verdicts read %q", g)
	}

	// A turn of a key that logs nothing says so, and offers nothing to read.
	p.open("#/cost?range=1h&trace=" + other.TraceID)
	p.wait("the other turn's payload note", `document.querySelector('[data-testid="payload"]').dataset.state === "none"`)
	if n := p.eval(`String(document.querySelectorAll('[data-testid="payload-show"]').length)`); n != "0" {
		t.Errorf("a turn without a payload offers %s buttons", n)
	}
}

// In fleet mode the payload log is the fleet's PostgreSQL: a turn logged
// on one instance is read and forgotten on another.
func TestPayloadLogInFleet(t *testing.T) {
	stream, subject := natsStream(t)
	cfg := payloadConfig(t)
	cfg.Events.Sinks.NATS.URL, cfg.Events.Sinks.NATS.Stream, cfg.Events.Sinks.NATS.Subject = "nats://127.0.0.1:4222", stream, subject
	cfg.EventStore.Driver, cfg.EventStore.DSN = eventstore.DriverPostgres, pgtest.DSN()+"&search_path="+pgtest.Schema(t)
	// fmgate ingest creates the event store's tables; the gateways only read them.
	pg, err := pgstore.Open(context.Background(), cfg.EventStore.DSN, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pg.Close()
	a, _ := instance(t, cfg)
	b, _ := instance(t, cfg)
	turn := shopTurn(t, a.srv.URL, shopKey, "s1", "Recommend a fantasy manga; card 4111 1111 1111 1111")
	if turn.Status != http.StatusOK {
		t.Fatalf("turn %+v", turn)
	}
	rec := waitPayload(t, b.srv.URL, turn.TraceID)
	if !strings.Contains(rec.Payload.Question, "[CARD]") || rec.Payload.Answer != turn.Text {
		t.Fatalf("read on the other instance: %+v", rec)
	}
	status, body := request(t, http.MethodPost, b.srv.URL+"/admin/forget", testAdminToken, `{"userIdHash":"`+rec.UserHash+`"}`)
	if status != http.StatusOK || !strings.Contains(body, `"payloadsDeleted":1`) {
		t.Fatalf("forget: %d %s", status, body)
	}
	if status, _ := request(t, http.MethodGet, a.srv.URL+"/admin/payloads/"+turn.TraceID, testAdminToken, ""); status != http.StatusNotFound {
		t.Fatalf("the forgotten payload on the first instance: %d", status)
	}
}

// A key created at run time with payloadLog has its turns logged under its
// id; with payload logs off, such a key is refused, naming the field.
func TestRunTimeKeyLogsPayloads(t *testing.T) {
	sc := newScenario(t, payloadConfig(t))
	status, body := request(t, http.MethodPost, sc.srv.URL+"/admin/keys", testAdminToken, `{"name":"storefront","payloadLog":true}`)
	var created struct {
		Key struct {
			ID         string `json:"id"`
			PayloadLog bool   `json:"payloadLog"`
		} `json:"key"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(body), &created); err != nil || status != http.StatusCreated || !created.Key.PayloadLog {
		t.Fatalf("create: %d %s", status, body)
	}
	turn := shopTurn(t, sc.srv.URL, created.Secret, "s1", "Recommend a fantasy manga")
	if rec := waitPayload(t, sc.srv.URL, turn.TraceID); rec.KeyID != created.Key.ID {
		t.Fatalf("the payload's key %q, want %q", rec.KeyID, created.Key.ID)
	}

	off := quickConfig()
	sc2 := newScenario(t, off)
	status, body = request(t, http.MethodPost, sc2.srv.URL+"/admin/keys", testAdminToken, `{"name":"storefront","payloadLog":true}`)
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, "payloadLog") {
		t.Fatalf("a payloadLog key with payload logs off: %d %s", status, body)
	}
}
