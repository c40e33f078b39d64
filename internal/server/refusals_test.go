package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricSum adds up the samples of a counter family whose labels match.
func metricSum(t *testing.T, body, name string, labels map[string]string) float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	var sum float64
	for _, m := range fams[name].GetMetric() {
		ok := true
		for _, lp := range m.GetLabel() {
			if want, has := labels[lp.GetName()]; has && want != lp.GetValue() {
				ok = false
			}
		}
		if ok && m.Counter != nil {
			sum += m.Counter.GetValue()
		}
	}
	return sum
}

// TestWebSocketRefusalsAreCounted: a burst on one WebSocket is mostly
// refused (turns in flight per connection, then the per-user rate limit);
// every refusal the client saw is counted once in /metrics and in the live
// figures, whichever limit refused it, and so are bad frames and bodies.
func TestWebSocketRefusalsAreCounted(t *testing.T) {
	_, srv := startServer(t, fastConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"X-User-Id": {"burst-user"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	const burst = 60
	for i := range burst {
		b, _ := json.Marshal(map[string]string{"action": "sendMessage", "requestId": fmt.Sprint("r", i), "sessionId": "s", "message": "hello", "locale": "en"})
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"action":"fly"}`)); err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	for ended := 0; ended < burst+1; {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("after %d answers: %v", ended, err)
		}
		var f wireFrame
		_ = json.Unmarshal(data, &f)
		switch f.Type {
		case "done":
			ended++
		case "error":
			ended++
			codes[f.Code]++
		}
	}
	if codes["rate_limited"] == 0 || codes["invalid_request"] != 1 {
		t.Fatalf("error frames by code %v: the burst was not refused", codes)
	}
	// The HTTP doors' own refusals count the same way.
	for _, path := range []string{"/v1/chat", "/v1/batch"} {
		if resp, _ := do(t, "POST", srv.URL+path, "null"); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("POST %s null: %d", path, resp.StatusCode)
		}
		codes["invalid_request"]++
	}
	// So do the cross-site checks in front of every chat route.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain POST: %d", resp.StatusCode)
	}
	codes["unsupported_media_type"]++
	refused := 0
	for _, n := range codes {
		refused += n
	}

	// Spans reach the metrics and the live figures asynchronously.
	deadline := time.Now().Add(10 * time.Second)
	for {
		body := adminGet(t, srv.URL+"/metrics")
		limited := metricSum(t, body, "fmgate_errors_total", map[string]string{"code": "rate_limited"})
		invalid := metricSum(t, body, "fmgate_errors_total", map[string]string{"code": "invalid_request"})
		throttles := metricSum(t, body, "fmgate_throttles_total", nil)
		media := metricSum(t, body, "fmgate_errors_total", map[string]string{"code": "unsupported_media_type"})
		var snap struct {
			Errors  int `json:"errors"`
			Refused int `json:"refused"`
		}
		_ = json.Unmarshal([]byte(adminGet(t, srv.URL+"/admin/live/snapshot")), &snap)
		if int(limited) == codes["rate_limited"] && int(invalid) == codes["invalid_request"] && int(throttles) == codes["rate_limited"] && int(media) == 1 && snap.Refused == refused && snap.Errors == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("client saw %v; /metrics counts rate_limited %v, invalid_request %v, throttles %v; live refused %d, errors %d (refusals are not gateway errors)",
				codes, limited, invalid, throttles, snap.Refused, snap.Errors)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A turn refused before the pipeline identified it is charged to the chat
// feature, as the turn would have been, not to a nameless "(none)" row.
func TestRefusedTurnsAreChargedToTheChatFeature(t *testing.T) {
	_, srv := startServer(t, fastConfig())
	if resp, _ := do(t, "POST", srv.URL+"/v1/chat", `{"sessionId":"s","message":""}`); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an empty message: %d", resp.StatusCode)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var rep struct {
			Rows []struct {
				Key   string `json:"key"`
				Turns int    `json:"turns"`
			} `json:"rows"`
		}
		_ = json.Unmarshal([]byte(adminGet(t, srv.URL+"/admin/cost?by=feature&from=-1h")), &rep)
		if len(rep.Rows) == 1 && rep.Rows[0].Key == "chat" && rep.Rows[0].Turns == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cost by feature %+v; want the refused turn in chat's row", rep.Rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A refused turn is counted in the language it was asked in, as an answered
// one is: its message's when the refusal came after the message was read
// (the pipeline's validation, a WebSocket frame beyond the connection's
// turns in flight), else the locale it sent. Only a refusal that read
// neither, a body that is not JSON, has no locale.
func TestRefusedTurnsAreCountedInTheirLanguage(t *testing.T) {
	cfg := fastConfig()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 500 // the first turns on the WebSocket are still in flight when the last frames arrive
		cfg.Sim.Models[name] = st
	}
	_, srv := startServer(t, cfg)
	const ja = "おすすめの少年漫画を教えてください"
	for _, tt := range []struct{ name, body string }{
		{"no session id", `{"sessionId":"","message":"` + ja + `"}`},
		{"a locale the gateway does not answer in", `{"sessionId":"s","message":"` + ja + `","locale":"fr"}`},
		{"an empty message", `{"sessionId":"s","message":" ","locale":"ja"}`},
		{"not JSON", `{"sessionId":`},
	} {
		if resp, _ := do(t, "POST", srv.URL+"/v1/chat", tt.body); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400", tt.name, resp.StatusCode)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"X-User-Id": {"locale-user"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	const frames = 6
	for i := range frames {
		b, _ := json.Marshal(map[string]string{"action": "sendMessage", "requestId": fmt.Sprint("r", i), "sessionId": "s", "message": ja, "locale": "en"})
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	inFlight := 0
	for ended := 0; ended < frames; {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("after %d answers: %v", ended, err)
		}
		var f wireFrame
		_ = json.Unmarshal(data, &f)
		switch f.Type {
		case "done":
			ended++
		case "error":
			ended++
			if strings.Contains(f.Message, "in flight") {
				inFlight++
			}
		}
	}
	if inFlight == 0 {
		t.Fatal("no frame was refused for the turns in flight on its connection")
	}

	want := map[string]int{"ja": 3 + frames, "": 1}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var rep struct {
			Rows []struct {
				Key   string `json:"key"`
				Turns int    `json:"turns"`
			} `json:"rows"`
		}
		_ = json.Unmarshal([]byte(adminGet(t, srv.URL+"/admin/cost?by=locale&from=-1h")), &rep)
		got := map[string]int{}
		for _, r := range rep.Rows {
			got[r.Key] = r.Turns
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("turns by locale %v, want %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
