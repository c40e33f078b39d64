package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// do runs browser actions, bounded like every wait.
func (p page) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// keyRow is the selector of the Keys view's row for the key named name.
func keyRow(name string) string {
	return `tr[data-testid="key-row"][data-name=` + strconv.Quote(name) + `]`
}

// chatStatus sends one turn on the OpenAI door with key and model.
func chatStatus(t *testing.T, base, key, model string) int {
	t.Helper()
	status, _ := keyPost(t, base, key, "/v1/chat/completions",
		`{"model":"`+model+`","messages":[{"role":"user","content":"Recommend a manga"}]}`)
	return status
}

// An operator manages a key's whole life in the dashboard's Keys view, on
// a gateway whose config has no key: the page refuses an empty name with
// the gateway's own words, creates a haiku-only key with a monthly budget
// and shows its secret once, shows what the key spent once it is used,
// edits its budgets and models, rotates it (both secrets work through the
// grace) and revokes it — each change made in the page and checked from
// outside it, with the secret, on the OpenAI door — and reads its history,
// each change with who made it. A key limited to an embedding tier, ticked
// in the same form, embeds with that tier only and has no chat.
func TestKeysPageInBrowser(t *testing.T) {
	// Keys that sign Bedrock requests need the seal key.
	t.Setenv("FMGATE_KEY_SEAL_KEY", strings.Repeat("ab", 32))
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	sc := newScenario(t, cfg)
	base := sc.srv.URL
	p := signIn(t, base)
	p.open("#/keys")
	p.wait("the model and embedding tiers as checkboxes", `document.querySelectorAll('#key-form input[name="models"]').length === 4`)
	if got := p.eval(`[...document.querySelectorAll('#key-form input[name="models"]')].map(b => b.value).join(",")`); got != "sonnet,haiku,titan-embed,cohere-embed" {
		t.Errorf("the tiers offered: %s, want the chat tiers then the embedding tiers", got)
	}
	if got := p.eval(`String(document.querySelector(".ranges").hidden)`); got != "true" {
		t.Errorf("the range buttons show on the Keys view, which reads no time range")
	}
	if got := p.text(`[data-testid="keys"] .empty`); !strings.Contains(got, "No key") {
		t.Errorf("an empty list says %q", got)
	}

	// No name: the gateway's 422 shows next to the form, the field marked.
	p.do("create without a name", chromedp.Click(chromedp.CSS(`#key-create`)))
	p.wait("the 422 problem shown", `(document.querySelector('[data-testid="create-problems"]') || {}).textContent?.includes("name: must not be empty")`)
	if got := p.eval(`document.getElementById("key-name").getAttribute("aria-invalid") || ""`); got != "true" {
		t.Errorf("the name field is not marked invalid (%q)", got)
	}
	if got := p.text(`[data-testid="create-problems"]`); !strings.Contains(got, "HTTP 422") {
		t.Errorf("the problem box says %q, want the gateway's status", got)
	}

	// The key, through the form: haiku only, $20 a month.
	p.do("fill in and submit the form",
		chromedp.SendKeys(chromedp.CSS(`#key-name`), "gift finder"),
		chromedp.SendKeys(chromedp.CSS(`#key-team`), "acme"),
		chromedp.Click(chromedp.CSS(`#key-model-haiku`)),
		chromedp.SendKeys(chromedp.CSS(`#key-monthly`), "20"),
		chromedp.Click(chromedp.CSS(`#key-create`)),
	)
	secretSel := `[data-testid="secret-box"] [data-testid="secret"]`
	p.wait("the secret shown", `/^fmk_/.test((document.querySelector('`+secretSel+`') || {}).textContent || "")`)
	secret := p.text(secretSel)
	if box := p.text(`[data-testid="secret-box"]`); !strings.Contains(box, "will not be shown again") {
		t.Errorf("the secret box says %q, want that it is shown once", box)
	}
	// The copy button copies, or says why not and selects the secret.
	p.do("copy the secret", chromedp.Click(chromedp.CSS(`[data-testid="secret-box"] [data-testid="copy-secret"]`)))
	p.wait("the copy answered", `!!document.querySelector('[data-testid="secret-box"] .secret-line [role="status"]').textContent`)
	if got := p.eval(`String(document.querySelector('[data-testid="create-problems"]').hidden)`); got != "true" {
		t.Errorf("the problem of the refused attempt still shows after the key was created")
	}
	row := keyRow("gift finder")
	p.wait("the key listed", `document.getElementById("view").dataset.state === "ready" && !!document.querySelector('`+row+`')`)
	if got := p.text(row + ` [data-testid="key-status"]`); got != "active" {
		t.Errorf("status %q, want active", got)
	}
	if got := p.text(row + ` [data-testid="key-models"]`); got != "haiku" {
		t.Errorf("models %q, want haiku", got)
	}
	if got := p.text(row + ` [data-testid="spend-month"]`); !strings.Contains(got, "of $20.00 this month") {
		t.Errorf("the monthly budget shows as %q", got)
	}
	if got := p.text(row + ` code`); !strings.HasPrefix(secret, strings.TrimSuffix(got, "…")) {
		t.Errorf("prefix %q is not the secret's start", got)
	}
	p.screenshot("dashboard-keys.png")

	// The secret works on haiku only.
	if s := chatStatus(t, base, secret, "haiku"); s != http.StatusOK {
		t.Fatalf("the new key on haiku: %d, want 200", s)
	}
	if s := chatStatus(t, base, secret, "sonnet"); s != http.StatusForbidden {
		t.Fatalf("the haiku-only key on sonnet: %d, want 403", s)
	}

	// Reloaded, the page shows what the key spent and never the secret.
	p.do("reload the page", chromedp.Reload())
	p.wait("the view reloaded", `document.getElementById("view").dataset.state === "ready" && !!document.querySelector('`+row+`')`)
	if spent := p.num(`document.querySelector('` + row + ` [data-testid="spend-month"]').dataset.value`); spent <= 0 {
		t.Errorf("spend this month $%g after a turn, want > 0", spent)
	}
	if got := p.eval(`String(document.body.textContent.includes(` + strconv.Quote(secret) + `))`); got != "false" {
		t.Errorf("the secret shows again after a reload")
	}

	// Edit: a budget the gateway refuses, then sonnet and $5 a day.
	p.do("open the edit row", chromedp.Click(chromedp.CSS(row+` button[data-action="edit"]`)))
	editRow := `tr[data-testid="key-action"][data-kind="edit"]`
	p.wait("the edit row", `!!document.querySelector('`+editRow+`')`)
	p.do("a negative budget",
		chromedp.SetValue(chromedp.CSS(editRow+` input[name="monthlyCostUsd"]`), "-1"),
		chromedp.Click(chromedp.CSS(editRow+` [data-testid="edit-save"]`)))
	p.wait("the PATCH's 422 shown", `(document.querySelector('`+editRow+` [data-testid="edit-problems"]') || {}).textContent?.includes("monthlyCostUsd: must be >= 0")`)
	p.do("sonnet and $5 a day",
		chromedp.SetValue(chromedp.CSS(editRow+` input[name="monthlyCostUsd"]`), "20"),
		chromedp.SetValue(chromedp.CSS(editRow+` input[name="dailyCostUsd"]`), "5"),
		chromedp.Click(chromedp.CSS(editRow+` input[value="sonnet"]`)),
		chromedp.Click(chromedp.CSS(editRow+` [data-testid="edit-save"]`)))
	p.wait("the edit saved", `!document.querySelector('`+editRow+`') && document.getElementById("view").dataset.state === "ready" && (document.querySelector('`+row+` [data-testid="key-models"]') || {}).textContent === "sonnet, haiku"`)
	if got := p.text(row + ` [data-testid="spend-today"]`); !strings.Contains(got, "of $5.00 today") {
		t.Errorf("the daily budget shows as %q", got)
	}
	if s := chatStatus(t, base, secret, "sonnet"); s != http.StatusOK {
		t.Fatalf("the key on sonnet once allowed: %d, want 200", s)
	}

	// Rotate with a grace of 20 seconds: the new secret shows once, and
	// both work.
	p.do("open the rotate row", chromedp.Click(chromedp.CSS(row+` button[data-action="rotate"]`)))
	rotateRow := `tr[data-testid="key-action"][data-kind="rotate"]`
	p.wait("the rotate row", `!!document.querySelector('`+rotateRow+`')`)
	if got := p.eval(`(() => { const r = document.querySelector('` + rotateRow + `'); return r.querySelector('input[name="graceSeconds"]').value + " " + r.querySelector("select").selectedOptions[0].text; })()`); got != "24 hours" {
		t.Errorf("the grace offered is %q, want 24 hours", got)
	}
	p.do("rotate with a 20 s grace",
		chromedp.SetValue(chromedp.CSS(rotateRow+` input[name="graceSeconds"]`), "20"),
		chromedp.SetValue(chromedp.CSS(rotateRow+` select`), "1"),
		chromedp.Click(chromedp.CSS(rotateRow+` [data-testid="rotate-confirm"]`)))
	p.wait("the new secret shown", `(() => { const b = document.querySelector('[data-testid="secret-box"][data-kind="rotated"] [data-testid="secret"]');
		return !!b && /^fmk_/.test(b.textContent) && b.textContent !== `+strconv.Quote(secret)+`; })()`)
	rotated := p.text(secretSel)
	if got := p.text(`[data-testid="previous-until"]`); !strings.Contains(got, "previous secret keeps working until") {
		t.Errorf("the rotation says %q, want until when the old secret works", got)
	}
	for name, s := range map[string]string{"old": secret, "new": rotated} {
		if st := chatStatus(t, base, s, "haiku"); st != http.StatusOK {
			t.Fatalf("the %s secret within the grace: %d, want 200", name, st)
		}
	}
	var list struct {
		Keys []struct {
			ID                 string    `json:"id"`
			UpdatedAt          time.Time `json:"updatedAt"`
			PreviousValidUntil time.Time `json:"previousValidUntil"`
		} `json:"keys"`
	}
	sc.getJSON("/admin/keys", &list)
	if len(list.Keys) != 1 {
		t.Fatalf("%d keys, want 1", len(list.Keys))
	}
	if grace := list.Keys[0].PreviousValidUntil.Sub(list.Keys[0].UpdatedAt); grace != 20*time.Second {
		t.Errorf("the rotation's grace is %v, want the 20 s asked for", grace)
	}

	// Revoke, after the confirmation: the new secret is refused.
	p.do("revoke", chromedp.Click(chromedp.CSS(row+` button[data-action="revoke"]`)))
	revokeRow := `tr[data-testid="key-action"][data-kind="revoke"]`
	p.wait("the confirmation", `!!document.querySelector('`+revokeRow+` [data-testid="revoke-confirm"]')`)
	if st := chatStatus(t, base, rotated, "haiku"); st != http.StatusOK {
		t.Fatalf("the key before the revocation is confirmed: %d, want 200", st)
	}
	p.do("confirm the revocation", chromedp.Click(chromedp.CSS(revokeRow+` [data-testid="revoke-confirm"]`)))
	p.wait("the key revoked", `(document.querySelector('`+row+` [data-testid="key-status"]') || {}).textContent === "revoked"`)
	for name, s := range map[string]string{"old": secret, "new": rotated} {
		if st := chatStatus(t, base, s, "haiku"); st != http.StatusUnauthorized {
			t.Fatalf("the %s secret of a revoked key: %d, want 401", name, st)
		}
	}
	if got := p.eval(`[...document.querySelectorAll('` + row + ` button')].map(b => b.dataset.action).join(",")`); got != "history" {
		t.Errorf("a revoked key offers %q, want its history alone", got)
	}
	if got := p.eval(`String(!!document.querySelector('[data-testid="secret-box"]'))`); got != "false" {
		t.Errorf("the revoked key's secret still shows")
	}
	var one struct {
		Status string `json:"status"`
	}
	sc.getJSON("/admin/keys/"+list.Keys[0].ID, &one)
	if one.Status != "revoked" {
		t.Errorf("GET the key: status %q, want revoked", one.Status)
	}

	// Its history: every change made in the page, newest first, by the
	// dashboard session. The spans reach the event store through the
	// emitter's queue: wait for them there first.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var trail keyAuditBody
		sc.getJSON("/admin/keys/"+list.Keys[0].ID+"/audit", &trail)
		if len(trail.Events) >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.do("open the history", chromedp.Click(chromedp.CSS(row+` button[data-action="history"]`)))
	history := `tr[data-testid="key-action"][data-kind="history"] [data-testid="key-history"]`
	p.wait("the history read", `(document.querySelector('`+history+`') || {dataset: {}}).dataset.state === "ready"`)
	if got := p.eval(`[...document.querySelectorAll('` + history + ` [data-testid="history-row"]')].map(r => r.dataset.action).join(" ")`); got != "revoked rotated updated created" {
		t.Errorf("the history shows %q, want revoked rotated updated created", got)
	}
	if got := p.text(history + ` [data-testid="history-row"][data-action="updated"]`); !strings.Contains(got, "dashboard session") || !strings.Contains(got, "models, monthlyRequests, dailyCostUsd, monthlyCostUsd") {
		t.Errorf("the update's line: %q, want who (the dashboard session) and the fields it sent", got)
	}

	// A key for the embeddings alone, ticked in the form.
	p.do("create an embeddings-only key",
		chromedp.SendKeys(chromedp.CSS(`#key-name`), "search indexer"),
		chromedp.Click(chromedp.CSS(`#key-model-titan-embed`)),
		chromedp.Click(chromedp.CSS(`#key-create`)))
	p.wait("its secret shown", `(() => { const b = document.querySelector('[data-testid="secret-box"][data-kind="created"]');
		return !!b && b.querySelector("h2").textContent.includes("search indexer") && /^fmk_/.test(b.querySelector('[data-testid="secret"]').textContent); })()`)
	indexer := p.text(secretSel)
	p.wait("the key listed with its tier", `(document.querySelector('`+keyRow("search indexer")+` [data-testid="key-models"]') || {}).textContent === "titan-embed"`)
	if status, body := keyPost(t, base, indexer, "/v1/embeddings", `{"model":"titan-embed","input":"manga"}`); status != http.StatusOK {
		t.Fatalf("the embeddings-only key on titan-embed: %d %s, want 200", status, body)
	}
	if status, body := keyPost(t, base, indexer, "/v1/embeddings", `{"model":"cohere-embed","input":"manga"}`); status != http.StatusForbidden || !strings.Contains(body, "model_not_allowed") {
		t.Fatalf("the embeddings-only key on cohere-embed: %d %s, want 403 model_not_allowed", status, body)
	}
	if s := chatStatus(t, base, indexer, "haiku"); s != http.StatusForbidden {
		t.Fatalf("the embeddings-only key on a chat tier: %d, want 403", s)
	}

	// A key that signs Bedrock requests: its access key id shows with its
	// secret access key, and in the list in place of a prefix.
	p.do("create a Bedrock signing key",
		chromedp.SendKeys(chromedp.CSS(`#key-name`), "bedrock app"),
		chromedp.Click(chromedp.CSS(`#key-bedrock`)),
		chromedp.Click(chromedp.CSS(`#key-create`)))
	p.wait("the access key pair shown", `/^FMAK/.test((document.querySelector('[data-testid="secret-box"] [data-testid="access-key-id"]') || {}).textContent || "")`)
	akid := p.text(`[data-testid="secret-box"] [data-testid="access-key-id"]`)
	if got := p.text(`[data-testid="secret-box"] [data-testid="secret"]`); got == "" || strings.HasPrefix(got, "fmk_") {
		t.Errorf("the secret access key shows as %q", got)
	}
	p.wait("the Bedrock key listed", `(document.querySelector('`+keyRow("bedrock app")+` code') || {}).textContent === `+strconv.Quote(akid))
}
