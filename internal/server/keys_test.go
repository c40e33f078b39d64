package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/keystore"
	"github.com/fmgate/fmgate/internal/pgtest"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/redistest"
)

// adminDo sends an admin request with the admin token and returns its
// status and body.
func adminDo(t *testing.T, base, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Fmgate-Operator", "ops-kenji")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type issuedKey struct {
	Key struct {
		ID                 string    `json:"id"`
		Status             string    `json:"status"`
		Prefix             string    `json:"prefix"`
		Models             []string  `json:"models"`
		PreviousValidUntil time.Time `json:"previousValidUntil"`
	} `json:"key"`
	Secret string `json:"secret"`
}

func createKey(t *testing.T, base, spec string) issuedKey {
	t.Helper()
	status, body := adminDo(t, base, http.MethodPost, "/admin/keys", spec)
	if status != http.StatusCreated {
		t.Fatalf("POST /admin/keys %s: %d %s", spec, status, body)
	}
	var k issuedKey
	if err := json.Unmarshal([]byte(body), &k); err != nil || k.Secret == "" || k.Key.ID == "" {
		t.Fatalf("POST /admin/keys answered %s (%v)", body, err)
	}
	return k
}

// onDoors sends a turn with key on each door that runs chat turns (the
// gateway's own over JSON and WebSocket, OpenAI's Chat Completions and
// Responses, Anthropic's Messages, Bedrock's Converse) and returns each
// status; a WebSocket turn's is that of its error frame's code.
func onDoors(t *testing.T, base, key, model string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for door, d := range map[string]struct{ path, body string }{
		"chat":      {"/v1/chat", `{"sessionId":"k","message":"Recommend a manga"}`},
		"openai":    {"/v1/chat/completions", `{"model":"` + model + `","messages":[{"role":"user","content":"Recommend a manga"}]}`},
		"responses": {"/v1/responses", `{"model":"` + model + `","input":"Recommend a manga"}`},
		"anthropic": {"/v1/messages", `{"model":"` + model + `","max_tokens":200,"messages":[{"role":"user","content":"Recommend a manga"}]}`},
		"bedrock":   {"/model/" + model + "/converse", `{"messages":[{"role":"user","content":[{"text":"Recommend a manga"}]}]}`},
	} {
		var body string
		out[door], body = keyPost(t, base, key, d.path, d.body)
		if door == "bedrock" && out[door] == http.StatusForbidden && (strings.Contains(body, "The API key is not valid") || strings.Contains(body, "Send Authorization")) {
			out[door] = http.StatusUnauthorized // Bedrock's UnrecognizedClientException is a 403
		}
	}
	out["ws"] = wsStatus(wsKeyTurn(t, base, key, "Recommend a manga"))
	return out
}

// wsStatus is the HTTP status a WebSocket turn's outcome stands for.
func wsStatus(a answer) int {
	switch a.Error.Code {
	case "":
		return a.Status
	case "unauthorized":
		return http.StatusUnauthorized
	case "model_not_allowed":
		return http.StatusForbidden
	case "budget_exceeded":
		return http.StatusPaymentRequired
	}
	return http.StatusInternalServerError
}

func allStatus(got map[string]int, want int) bool {
	for _, s := range got {
		if s != want {
			return false
		}
	}
	return len(got) > 0
}

// A key's whole life through the admin API, on a gateway whose config has
// no key at all: created (its secret shown once), used on every door,
// narrowed to haiku, rotated (both secrets work through the grace, then
// only the new), revoked — each change effective at once, none needing a
// restart, and each an audit span in the event store.
func TestKeyLifecycleThroughTheAdminAPI(t *testing.T) {
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	// Two rounds of the six doors follow each other within a second: the
	// per-user limit (5 a second, bursts of 10) is not what is tested here.
	cfg.RateLimit.User = ratelimit.UserRules{}
	spans := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = spans
	sc := newScenario(t, cfg)
	base := sc.srv.URL

	if got := onDoors(t, base, "fmk_nothing", "sonnet"); !allStatus(got, http.StatusUnauthorized) {
		t.Fatalf("before any key: %v, want 401 everywhere", got)
	}
	k := createKey(t, base, `{"name":"shop app","team":"acme","app":"shop","monthlyCostUsd":20}`)
	if !strings.HasPrefix(k.Secret, "fmk_") || k.Key.Status != "active" || k.Key.Prefix != k.Secret[:10] {
		t.Fatalf("created %+v", k)
	}
	if got := onDoors(t, base, k.Secret, "sonnet"); !allStatus(got, http.StatusOK) {
		t.Fatalf("the new key: %v, want 200 on every door", got)
	}
	// What it spent shows on the key, and stays through a rotation.
	spend := func() (today, month float64) {
		t.Helper()
		_, body := adminDo(t, base, http.MethodGet, "/admin/keys/"+k.Key.ID, "")
		var v struct {
			Spend struct {
				TodayUSD float64 `json:"todayUsd"`
				MonthUSD float64 `json:"monthUsd"`
			} `json:"spend"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("GET the key: %s (%v)", body, err)
		}
		return v.Spend.TodayUSD, v.Spend.MonthUSD
	}
	if today, month := spend(); today <= 0 || today != month {
		t.Fatalf("spend after three turns: today $%g, month $%g", today, month)
	}
	spentBefore, _ := spend()
	// The list and the key show no secret and no hash.
	status, list := adminDo(t, base, http.MethodGet, "/admin/keys", "")
	if status != http.StatusOK || !strings.Contains(list, k.Key.ID) || strings.Contains(list, k.Secret) || strings.Contains(list, "hash") {
		t.Fatalf("GET /admin/keys: %d %s", status, list)
	}

	if status, body := adminDo(t, base, http.MethodPatch, "/admin/keys/"+k.Key.ID, `{"models":["haiku"]}`); status != http.StatusOK || !strings.Contains(body, `"models":["haiku"]`) {
		t.Fatalf("PATCH models: %d %s", status, body)
	}
	if got := onDoors(t, base, k.Secret, "sonnet"); got["openai"] != http.StatusForbidden || got["responses"] != http.StatusForbidden || got["anthropic"] != http.StatusForbidden ||
		got["bedrock"] != http.StatusForbidden || got["chat"] != http.StatusOK || got["ws"] != http.StatusOK {
		t.Fatalf("a haiku-only key asking for sonnet: %v, want 403 on the vendors' doors (the gateway's own doors start at haiku)", got)
	}
	if status, body := adminDo(t, base, http.MethodPatch, "/admin/keys/"+k.Key.ID, `{"models":["opus"]}`); status != http.StatusUnprocessableEntity || !strings.Contains(body, `unknown model tier \"opus\"`) {
		t.Fatalf("PATCH an unknown tier: %d %s", status, body)
	}
	if status, body := adminDo(t, base, http.MethodPatch, "/admin/keys/"+k.Key.ID, `{"modles":["haiku"]}`); status != http.StatusBadRequest || !strings.Contains(body, "modles") {
		t.Fatalf("PATCH a misspelled field: %d %s", status, body)
	}

	status, body := adminDo(t, base, http.MethodPost, "/admin/keys/"+k.Key.ID+"/rotate", `{"graceSeconds":2}`)
	var rot issuedKey
	if err := json.Unmarshal([]byte(body), &rot); status != http.StatusOK || err != nil || rot.Secret == "" || rot.Secret == k.Secret {
		t.Fatalf("rotate: %d %s", status, body)
	}
	for name, secret := range map[string]string{"old": k.Secret, "new": rot.Secret} {
		if got := onDoors(t, base, secret, "haiku"); !allStatus(got, http.StatusOK) {
			t.Fatalf("the %s secret during the grace: %v", name, got)
		}
	}
	time.Sleep(time.Until(rot.Key.PreviousValidUntil) + 50*time.Millisecond)
	if got := onDoors(t, base, k.Secret, "haiku"); !allStatus(got, http.StatusUnauthorized) {
		t.Fatalf("the old secret after the grace: %v, want 401", got)
	}
	if got := onDoors(t, base, rot.Secret, "haiku"); !allStatus(got, http.StatusOK) {
		t.Fatalf("the new secret after the grace: %v", got)
	}
	if today, _ := spend(); today <= spentBefore {
		t.Fatalf("spend after the rotation: $%g, was $%g: the key's spend must carry on", today, spentBefore)
	}

	// A WebSocket opened before the revocation is refused its next turn.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + rot.Secret}}})
	if err != nil {
		t.Fatal(err)
	}
	defer open.CloseNow()
	if a := wsSend(ctx, t, open, "Recommend a manga"); a.Status != http.StatusOK {
		t.Fatalf("a turn on the open WebSocket before the revocation: %+v", a)
	}
	if status, body := adminDo(t, base, http.MethodDelete, "/admin/keys/"+k.Key.ID, ""); status != http.StatusOK || !strings.Contains(body, `"status":"revoked"`) {
		t.Fatalf("DELETE: %d %s", status, body)
	}
	if got := onDoors(t, base, rot.Secret, "haiku"); !allStatus(got, http.StatusUnauthorized) {
		t.Fatalf("a revoked key: %v, want 401 everywhere", got)
	}
	if a := wsSend(ctx, t, open, "Recommend a manga"); a.Error.Code != "unauthorized" {
		t.Fatalf("a turn on a WebSocket opened before the revocation: %+v, want unauthorized", a)
	}
	for path, body := range map[string]string{
		"/v1/embeddings": `{"model":"titan-embed","input":"manga"}`,
		"/v1/batch":      `{"messages":[{"message":"Recommend a manga"}]}`,
	} {
		if status, got := keyPost(t, base, rot.Secret, path, body); status != http.StatusUnauthorized {
			t.Fatalf("%s with a revoked key: %d %s, want 401", path, status, got)
		}
	}
	if status, _ := adminDo(t, base, http.MethodDelete, "/admin/keys/key_none", ""); status != http.StatusNotFound {
		t.Fatalf("DELETE an unknown key: %d", status)
	}
	// The answers that show a secret are kept by no cache.
	req, _ := http.NewRequest(http.MethodPost, base+"/admin/keys", strings.NewReader(`{"name":"cached?"}`))
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("POST /admin/keys: %v, Cache-Control %q; want 201 and no-store", err, resp.Header.Get("Cache-Control"))
	} else {
		resp.Body.Close()
	}
	// Without the admin token nothing of this is reachable.
	req, _ = http.NewRequest(http.MethodGet, base+"/admin/keys", nil)
	req.Header.Set("Authorization", "Bearer "+rot.Secret)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /admin/keys with an API key: %v %v", resp.StatusCode, err)
	}

	// Every change is an audit span: what, which key, by whom.
	sc.s.Close()
	var audit []string
	for _, e := range readSpans(t, spans) {
		if e.Name == "key_audit" {
			audit = append(audit, e.Outcome.ErrorCode)
		}
	}
	if want := "key_created key_updated key_rotated key_revoked key_created"; strings.Join(audit, " ") != want {
		t.Fatalf("audit spans %q, want %q", audit, want)
	}
	// Neither secret is in the events, the audit spans among them.
	raw, err := os.ReadFile(spans)
	if err != nil {
		t.Fatal(err)
	}
	for name, secret := range map[string]string{"first": k.Secret, "rotated": rot.Secret} {
		if strings.Contains(string(raw), secret) {
			t.Fatalf("the %s secret is in the events", name)
		}
	}
}

// In a fleet (keys in PostgreSQL, state in Redis), a key created on one
// instance works on the others within a second, and a revocation on one
// is refused by all three within a second.
func TestKeyRevocationIsFleetWide(t *testing.T) {
	stream, subject := natsStream(t)
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	cfg.EventStore.Path = ""
	cfg.Events.Sinks.NATS.URL, cfg.Events.Sinks.NATS.Stream, cfg.Events.Sinks.NATS.Subject = "nats://127.0.0.1:4222", stream, subject
	cfg.EventStore.Driver, cfg.EventStore.DSN = eventstore.DriverPostgres, pgtest.DSN()+"&search_path="+pgtest.Schema(t)
	var fleet []*scenario
	for range 3 {
		fleet = append(fleet, newScenario(t, cfg))
	}
	k := createKey(t, fleet[0].srv.URL, `{"name":"fleet app","team":"acme"}`)
	// within waits until every instance answers the key with want, all
	// within one second of since.
	within := func(what string, since time.Time, want int) {
		t.Helper()
		deadline := since.Add(time.Second)
		left := map[int]bool{0: true, 1: true, 2: true}
		for len(left) > 0 {
			for i := range left {
				// Counting tokens checks the key as a turn does, and costs nothing.
				s, _ := keyPost(t, fleet[i].srv.URL, k.Secret, "/v1/messages/count_tokens", `{"model":"sonnet","messages":[{"role":"user","content":"Hi"}]}`)
				if s == want {
					delete(left, i)
				}
			}
			if len(left) > 0 && time.Now().After(deadline) {
				t.Fatalf("%s: instances %v (from 0) still answer otherwise a second after", what, left)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	within("the new key", time.Now(), http.StatusOK)
	asked := time.Now()
	if status, body := adminDo(t, fleet[1].srv.URL, http.MethodDelete, "/admin/keys/"+k.Key.ID, ""); status != http.StatusOK {
		t.Fatalf("revoke on instance 2: %d %s", status, body)
	}
	within("the revocation", asked, http.StatusUnauthorized)
	for i, sc := range fleet {
		if s, body := keyPost(t, sc.srv.URL, k.Secret, "/v1/chat", `{"sessionId":"f","message":"Hi"}`); s != http.StatusUnauthorized {
			t.Fatalf("a turn on instance %d after the revocation: %d %s", i+1, s, body)
		}
	}
}

// Keys in the config file keep working next to run-time keys.
func TestConfigKeysAndRuntimeKeysTogether(t *testing.T) {
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	cfg.Auth.Keys = map[string]config.Caller{"sk-config": {UserID: "from-config"}}
	sc := newScenario(t, cfg)
	k := createKey(t, sc.srv.URL, `{"name":"runtime"}`)
	for _, key := range []string{"sk-config", k.Secret} {
		if got := onDoors(t, sc.srv.URL, key, "sonnet"); !allStatus(got, http.StatusOK) {
			t.Fatalf("key %.10s: %v", key, got)
		}
	}
}

// A fleet without PostgreSQL has no key store its instances share: a key
// created on one would be unknown to the others and its revocation would
// not reach them, so none is created, and the answer says what to set.
func TestFleetWithoutPostgresCreatesNoKeys(t *testing.T) {
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	sc := newScenario(t, cfg)
	status, body := adminDo(t, sc.srv.URL, http.MethodPost, "/admin/keys", `{"name":"fleet app"}`)
	if status != http.StatusConflict || !strings.Contains(body, `"code":"keys_not_shared"`) || !strings.Contains(body, "eventStore.driver: postgres") {
		t.Fatalf("POST /admin/keys in a fleet without PostgreSQL: %d %s; want 409 naming eventStore.driver", status, body)
	}
	if status, body := adminDo(t, sc.srv.URL, http.MethodGet, "/admin/keys", ""); status != http.StatusOK || !strings.Contains(body, `"keys":null`) && !strings.Contains(body, `"keys":[]`) {
		t.Fatalf("GET /admin/keys: %d %s", status, body)
	}
}

// keyAuditBody is the answer of GET /admin/keys/{id}/audit.
type keyAuditBody struct {
	KeyID  string `json:"keyId"`
	Limit  int    `json:"limit"`
	Events []struct {
		At      time.Time `json:"at"`
		Action  string    `json:"action"`
		By      string    `json:"by"`
		Changed []string  `json:"changed"`
		Note    string    `json:"note"`
		TraceID string    `json:"traceId"`
	} `json:"events"`
}

// A key's audit trail through the admin API: every change to it, newest
// first, with who made it and what an update sent, never its secret;
// another key's changes are not in it; limit bounds it, a bad limit is a
// 400, an unknown key a 404, and an API key reads none of it.
func TestKeyAuditTrailThroughTheAdminAPI(t *testing.T) {
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	sc := newScenario(t, cfg)
	base := sc.srv.URL

	k := createKey(t, base, `{"name":"gift finder","team":"acme","monthlyCostUsd":20}`)
	other := createKey(t, base, `{"name":"other app","team":"zeta"}`)
	if status, body := adminDo(t, base, http.MethodPatch, "/admin/keys/"+k.Key.ID, `{"monthlyCostUsd":30,"models":["haiku"]}`); status != http.StatusOK {
		t.Fatalf("PATCH: %d %s", status, body)
	}
	if status, body := adminDo(t, base, http.MethodPatch, "/admin/keys/"+other.Key.ID, `{"team":"omega"}`); status != http.StatusOK {
		t.Fatalf("PATCH the other key: %d %s", status, body)
	}
	status, body := adminDo(t, base, http.MethodPost, "/admin/keys/"+k.Key.ID+"/rotate", `{"graceSeconds":0}`)
	var rot issuedKey
	if err := json.Unmarshal([]byte(body), &rot); status != http.StatusOK || err != nil {
		t.Fatalf("rotate: %d %s", status, body)
	}
	if status, body := adminDo(t, base, http.MethodDelete, "/admin/keys/"+k.Key.ID, ""); status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", status, body)
	}

	// The spans reach the event store through the emitter's queue: read
	// until the four changes are there.
	var trail keyAuditBody
	var raw string
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, raw = adminDo(t, base, http.MethodGet, "/admin/keys/"+k.Key.ID+"/audit", "")
		if status != http.StatusOK {
			t.Fatalf("GET audit: %d %s", status, raw)
		}
		trail = keyAuditBody{}
		if err := json.Unmarshal([]byte(raw), &trail); err != nil {
			t.Fatalf("GET audit: %s (%v)", raw, err)
		}
		if len(trail.Events) >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var actions []string
	for _, e := range trail.Events {
		actions = append(actions, e.Action)
		if e.By != "admin token (ops-kenji)" || e.At.IsZero() || len(e.TraceID) != 32 {
			t.Fatalf("entry %+v: want who (the admin token, named ops-kenji), when and its trace", e)
		}
	}
	if want := "revoked rotated updated created"; strings.Join(actions, " ") != want || trail.KeyID != k.Key.ID || trail.Limit != 50 {
		t.Fatalf("the trail of %s: %q (key %s, limit %d), want %q newest first, limit 50", k.Key.ID, actions, trail.KeyID, trail.Limit, want)
	}
	for i := 1; i < len(trail.Events); i++ {
		if trail.Events[i].At.After(trail.Events[i-1].At) {
			t.Fatalf("entry %d (%s) is newer than the one before it (%s)", i, trail.Events[i].At, trail.Events[i-1].At)
		}
	}
	if got := trail.Events[2].Changed; strings.Join(got, ",") != "models,monthlyCostUsd" {
		t.Fatalf("the update's fields: %v, want models and monthlyCostUsd", got)
	}
	if !strings.Contains(trail.Events[3].Note, `key "gift finder", team "acme"`) {
		t.Fatalf("the creation's note %q does not name the key", trail.Events[3].Note)
	}
	for name, secret := range map[string]string{"first": k.Secret, "rotated": rot.Secret} {
		if strings.Contains(raw, secret) || strings.Contains(raw, secret[:10]) {
			t.Fatalf("the %s secret (or its prefix) is in the trail: %s", name, raw)
		}
	}

	// The other key's trail is its own.
	_, raw = adminDo(t, base, http.MethodGet, "/admin/keys/"+other.Key.ID+"/audit", "")
	var theirs keyAuditBody
	if err := json.Unmarshal([]byte(raw), &theirs); err != nil || len(theirs.Events) != 2 || theirs.Events[0].Action != "updated" ||
		strings.Join(theirs.Events[0].Changed, ",") != "team" || theirs.Events[1].Action != "created" {
		t.Fatalf("the other key's trail: %s", raw)
	}

	status, raw = adminDo(t, base, http.MethodGet, "/admin/keys/"+k.Key.ID+"/audit?limit=2", "")
	var two keyAuditBody
	if err := json.Unmarshal([]byte(raw), &two); status != http.StatusOK || err != nil || len(two.Events) != 2 ||
		two.Events[0].Action != "revoked" || two.Events[1].Action != "rotated" || two.Limit != 2 {
		t.Fatalf("limit=2: %d %s", status, raw)
	}
	for _, q := range []string{"limit=0", "limit=501", "limit=ten", "limit=", "limit=2&limit=3", "limit=-1"} {
		status, raw := adminDo(t, base, http.MethodGet, "/admin/keys/"+k.Key.ID+"/audit?"+q, "")
		if status != http.StatusBadRequest || !strings.Contains(raw, `"code":"invalid_request"`) || !strings.Contains(raw, "limit") {
			t.Fatalf("?%s: %d %s, want 400 invalid_request naming limit", q, status, raw)
		}
	}
	if status, raw := adminDo(t, base, http.MethodGet, "/admin/keys/key_none/audit", ""); status != http.StatusNotFound || !strings.Contains(raw, `"code":"not_found"`) {
		t.Fatalf("an unknown key's trail: %d %s, want 404 not_found", status, raw)
	}
	fresh := createKey(t, base, `{"name":"reader"}`)
	req, _ := http.NewRequest(http.MethodGet, base+"/admin/keys/"+k.Key.ID+"/audit", nil)
	req.Header.Set("Authorization", "Bearer "+fresh.Secret)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET audit with an API key: %v %v, want 401", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
}

// Without an event store the trail is not kept: 501 says so, for a key
// that exists.
func TestKeyAuditWithoutAnEventStore(t *testing.T) {
	cfg := quickConfig()
	cfg.EventStore.Path = ""
	sc := newScenario(t, cfg)
	k := createKey(t, sc.srv.URL, `{"name":"no store"}`)
	if status, raw := adminDo(t, sc.srv.URL, http.MethodGet, "/admin/keys/"+k.Key.ID+"/audit", ""); status != http.StatusNotImplemented || !strings.Contains(raw, `"code":"no_event_store"`) {
		t.Fatalf("GET audit without an event store: %d %s", status, raw)
	}
}

// The note an audit span carries reads back into who and what, whatever
// the name holds; a note of the earlier form gives who alone.
func TestKeyNoteReadsBack(t *testing.T) {
	tests := []struct {
		name        string
		action, by  string
		changed     []string
		keyName     string
		note        string // "" builds it with keyNote
		wantBy      string
		wantChanged []string
	}{
		{name: "created", action: "created", by: "admin token", keyName: "shop", wantBy: "admin token"},
		{name: "updated", action: "updated", by: "dashboard session (ana)", changed: []string{"models", "expiresAt"}, keyName: "a", wantBy: "dashboard session (ana)", wantChanged: []string{"models", "expiresAt"}},
		{name: "a name that looks like a note", action: "revoked", by: `admin token (x"; changed y)`, keyName: `z" by "q; changed w`, wantBy: `admin token (x"; changed y)`},
		{name: "the earlier form", action: "updated", note: `updated key key_ab ("shop", team "acme") by admin token (ops)`, wantBy: "admin token (ops)"},
		{name: "no note", action: "rotated", note: "-", wantBy: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			note := tt.note
			if note == "" {
				note = keyNote(tt.action, tt.by, tt.changed, keystore.Record{Name: tt.keyName, Team: "acme"})
			}
			if note == "-" {
				note = ""
			}
			by, changed := readKeyNote(tt.action, note)
			if by != tt.wantBy || strings.Join(changed, ",") != strings.Join(tt.wantChanged, ",") {
				t.Fatalf("readKeyNote(%q) = %q, %v; want %q, %v", note, by, changed, tt.wantBy, tt.wantChanged)
			}
		})
	}
}

// A run-time key may be limited to embedding tiers as to chat tiers: the
// admin API takes their names (and refuses an unknown one), the embeddings
// door serves only the tiers listed, and a key listing no chat tier has no
// chat; one listing chat tiers alone has no embeddings.
func TestKeyLimitedToEmbeddingTiers(t *testing.T) {
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	sc := newScenario(t, cfg)
	base := sc.srv.URL
	if status, body := adminDo(t, base, http.MethodPost, "/admin/keys", `{"name":"typo","models":["titan-embd"]}`); status != http.StatusUnprocessableEntity ||
		!strings.Contains(body, `unknown model tier \"titan-embd\"`) || !strings.Contains(body, "titan-embed") {
		t.Fatalf("an unknown embedding tier: %d %s, want 422 listing the tiers", status, body)
	}
	k := createKey(t, base, `{"name":"search indexer","models":["titan-embed"]}`)
	if strings.Join(k.Key.Models, ",") != "titan-embed" {
		t.Fatalf("the key's models: %v", k.Key.Models)
	}
	embed := func(model string) (int, string) {
		t.Helper()
		return keyPost(t, base, k.Secret, "/v1/embeddings", `{"model":"`+model+`","input":"fantasy manga"}`)
	}
	if status, body := embed("titan-embed"); status != http.StatusOK || !strings.Contains(body, `"embedding"`) {
		t.Fatalf("titan-embed with a titan-embed key: %d %s", status, body)
	}
	if status, body := embed("cohere-embed"); status != http.StatusForbidden || !strings.Contains(body, "model_not_allowed") {
		t.Fatalf("cohere-embed with a titan-embed key: %d %s, want 403 model_not_allowed", status, body)
	}
	if got := onDoors(t, base, k.Secret, "haiku"); !allStatus(got, http.StatusForbidden) {
		t.Fatalf("chat with an embeddings-only key: %v, want 403 on every door", got)
	}
	if status, body := adminDo(t, base, http.MethodPatch, "/admin/keys/"+k.Key.ID, `{"models":["haiku","cohere-embed"]}`); status != http.StatusOK {
		t.Fatalf("PATCH: %d %s", status, body)
	}
	if status, _ := embed("cohere-embed"); status != http.StatusOK {
		t.Fatalf("cohere-embed once listed: %d, want 200", status)
	}
	if status, _ := embed("titan-embed"); status != http.StatusForbidden {
		t.Fatalf("titan-embed once unlisted: %d, want 403", status)
	}
	if status := chatStatus(t, base, k.Secret, "haiku"); status != http.StatusOK {
		t.Fatalf("haiku once listed: %d, want 200", status)
	}
	if status, body := adminDo(t, base, http.MethodPatch, "/admin/keys/"+k.Key.ID, `{"models":["haiku"]}`); status != http.StatusOK {
		t.Fatalf("PATCH: %d %s", status, body)
	}
	if status, _ := embed("cohere-embed"); status != http.StatusForbidden {
		t.Fatalf("embeddings with a chat-only key: %d, want 403", status)
	}
}
