package scenario

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// user is one simulated chat user. Users with a key authenticate with it
// (auth.keys gives their tier and priority); the others are P0 standard
// users behind the trusted X-User-Id header.
type user struct {
	id, locale, key, tier, priority string
}

// users is the load's population: a little over half Japanese-speaking;
// one in ten premium, one in ten P1 (async user-facing), one in ten P2.
func users(n int) []user {
	out := make([]user, n)
	for i := range out {
		u := user{id: fmt.Sprintf("u%04d", i), locale: "en", tier: "standard", priority: "P0"}
		if i%20 < 11 {
			u.locale = "ja"
		}
		switch i % 10 {
		case 7:
			u.tier = "premium"
		case 8:
			u.priority = "P1"
		case 9:
			u.priority = "P2"
		}
		if u.tier != "standard" || u.priority != "P0" {
			u.key = "sk-scenario-" + u.id
		}
		out[i] = u
	}
	return out
}

var messages = map[string][]string{
	"ja": {
		"おすすめの少年漫画は？",
		"ワンピースの最新刊はいつ発売ですか？",
		"送料はいくらかかりますか？",
		"注文をキャンセルしたいです。",
		"鬼滅の刃に似た漫画を教えてください。",
		"電子書籍版はありますか？",
		"初心者向けの恋愛漫画を三つ教えて。",
		"ポイントの使い方がわかりません。",
	},
	"en": {
		"Which manga should I read after Naruto?",
		"When does the next volume of Spy x Family ship?",
		"How long does shipping to Canada take?",
		"Can I return a damaged box set?",
		"Recommend a short horror manga, please.",
		"Is the Chainsaw Man box set in stock?",
		"What's the difference between the deluxe and standard editions?",
		"Do you have English translations of Yotsuba?",
	},
}

// Channels a turn can take.
const (
	chanWS   = "ws"
	chanSSE  = "sse"
	chanJSON = "json"
)

// Outcomes of a turn, as its client saw it.
const (
	outAnswered = "answered"  // done frame / 200 answer
	outRefused  = "refused"   // 4xx: rate limited, quota, queue, budget
	outError    = "error"     // an error frame or 5xx the client got
	outCut      = "cut"       // the connection broke: a visible transport error
	outLost     = "lost"      // no end within turnTimeout, or a stream ended silently
	outNoTarget = "no_target" // no instance up to send it to
)

// TurnRecord is one load turn as its client saw it. Times are since the
// run's start.
type TurnRecord struct {
	Start, FirstByte, End time.Duration `json:"-"`
	Instance              int
	Channel, Priority     string
	Status                int // HTTP status; 101 for a WebSocket
	Outcome, Code, Detail string
	Tier                  string
	Degraded              bool
	TraceID               string
	InputTokens           int
	Rerouted              int // instances tried before this one
	Probe                 bool

	streaming bool // counted in runner.streaming
}

// recorder keeps the turn records and live counters for the display.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	turns []TurnRecord
	notes []Mark // the fault timeline, for the live display
}

func (rc *recorder) add(t TurnRecord) {
	rc.mu.Lock()
	rc.turns = append(rc.turns, t)
	rc.mu.Unlock()
}

// reset drops what was recorded before the run's clock started, and
// starts the clock.
func (rc *recorder) reset() {
	rc.mu.Lock()
	rc.turns, rc.notes = nil, nil
	rc.start = time.Now()
	rc.mu.Unlock()
}

func (rc *recorder) note(s string) {
	rc.mu.Lock()
	rc.notes = append(rc.notes, Mark{At: time.Since(rc.start), Label: s})
	rc.mu.Unlock()
}

func (rc *recorder) all() []TurnRecord {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]TurnRecord(nil), rc.turns...)
}

// load sends turns at opts.Rate for opts.Duration (open loop: arrivals do
// not wait for answers) and returns the group of turns still in flight.
func (r *runner) load(ctx context.Context) *sync.WaitGroup {
	pop := users(r.opts.users())
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / r.opts.Rate)
	end := r.start.Add(r.opts.Duration)
	next := time.Now()
	for seq := 0; ; seq++ {
		next = next.Add(interval)
		if next.After(end) {
			break
		}
		select {
		case <-ctx.Done():
			return &wg
		case <-time.After(time.Until(next)):
		}
		u := pop[r.intn(len(pop))]
		ch := chanWS
		switch x := r.float(); {
		case x < 0.45:
		case x < 0.85:
			ch = chanSSE
		default:
			ch = chanJSON
		}
		msgs := messages[u.locale]
		msg := msgs[r.intn(len(msgs))]
		session := "s-" + u.id
		wg.Go(func() {
			r.rec.add(r.turn(ctx, u, ch, session, msg, fmt.Sprintf("r%d", seq), nil))
		})
	}
	return &wg
}

// turn sends one message and follows it to its end. pin, when set, is the
// only instance to use (probes); otherwise an instance is picked by the
// balancer and, when it refuses before accepting (connection refused, or
// shutting_down), the next one, as a load balancer retries.
func (r *runner) turn(ctx context.Context, u user, ch, session, msg, reqID string, pin *instance) TurnRecord {
	rec := TurnRecord{Start: r.since(), Channel: ch, Priority: u.priority, Instance: -1}
	tried := map[int]bool{}
	for {
		in := pin
		if in == nil {
			in = r.lb.pick(tried)
		}
		if in == nil {
			rec.Outcome, rec.End = outNoTarget, r.since()
			return rec
		}
		tried[in.id] = true
		rec.Instance = in.id
		tctx, cancel := context.WithTimeout(ctx, turnTimeout)
		var retry bool
		switch ch {
		case chanWS:
			retry = r.wsTurn(tctx, in, u, session, msg, reqID, &rec)
		case chanSSE:
			retry = r.httpTurn(tctx, in, u, session, msg, true, &rec)
		default:
			retry = r.httpTurn(tctx, in, u, session, msg, false, &rec)
		}
		if tctx.Err() != nil && ctx.Err() == nil && rec.Outcome == "" {
			rec.Outcome, rec.Detail = outLost, "no end within "+turnTimeout.String()
		}
		cancel()
		if rec.streaming {
			rec.streaming = false
			r.streaming[in.id].Add(-1)
		}
		if retry && pin == nil {
			rec.Rerouted++
			r.lb.setUp(in.id, false)
			rec.Outcome, rec.Code, rec.Detail, rec.FirstByte = "", "", "", 0
			continue
		}
		rec.End = r.since()
		if rec.Outcome == "" {
			rec.Outcome = outLost
		}
		return rec
	}
}

func authHeaders(h http.Header, u user) {
	if u.key != "" {
		h.Set("Authorization", "Bearer "+u.key)
	} else {
		h.Set("X-User-Id", u.id)
	}
}

// isDial says err happened before the request reached the instance.
func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// frame is a server frame of the chat contract.
type frame struct {
	Type      string `json:"type"`
	RequestID string `json:"requestId"`
	Tier      string `json:"tier"`
	Degraded  bool   `json:"degraded"`
	TraceID   string `json:"traceId"`
	Tokens    struct {
		Input int `json:"input"`
	} `json:"tokens"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// onFrame applies f to rec; it returns true at a terminal frame.
func (r *runner) onFrame(f frame, rec *TurnRecord) bool {
	switch f.Type {
	case "chunk":
		if rec.FirstByte == 0 {
			rec.FirstByte = r.since()
		}
		if !rec.streaming && rec.Instance >= 0 {
			rec.streaming = true
			r.streaming[rec.Instance].Add(1)
		}
	case "done":
		if rec.FirstByte == 0 {
			rec.FirstByte = r.since()
		}
		rec.Outcome, rec.Tier, rec.Degraded, rec.TraceID, rec.InputTokens = outAnswered, f.Tier, f.Degraded, f.TraceID, f.Tokens.Input
		return true
	case "error":
		if rec.FirstByte == 0 {
			rec.FirstByte = r.since()
		}
		rec.Code, rec.Detail = f.Code, f.Message
		rec.Outcome = outError
		if refusal(f.Code) {
			rec.Outcome = outRefused
		}
		return true
	}
	return false
}

// refusal says an error code is a 4xx-class refusal (the client's limits),
// not a failure of the gateway.
func refusal(code string) bool {
	switch code {
	case "rate_limited", "quota_exhausted", "queue_full", "budget_exceeded", "invalid_request", "too_large", "unauthorized", "duplicate_request":
		return true
	}
	return false
}

// httpTurn is POST /v1/chat, as JSON or as SSE; it returns true when the
// instance refused before accepting the turn.
func (r *runner) httpTurn(ctx context.Context, in *instance, u user, session, msg string, stream bool, rec *TurnRecord) bool {
	body, _ := json.Marshal(map[string]any{"sessionId": session, "message": msg, "locale": u.locale, "stream": stream})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, in.url+"/v1/chat", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	authHeaders(req.Header, u)
	resp, err := r.client.Do(req)
	if err != nil {
		if isDial(err) {
			return true
		}
		rec.Outcome, rec.Detail = outCut, err.Error()
		if ctx.Err() != nil {
			rec.Outcome = ""
		}
		return false
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK || !stream {
		data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		rec.FirstByte = r.since()
		if err != nil {
			rec.Outcome, rec.Detail = outCut, err.Error()
			return false
		}
		var a struct {
			Tier     string `json:"tier"`
			Degraded bool   `json:"degraded"`
			TraceID  string `json:"traceId"`
			Usage    struct {
				Input int `json:"input"`
			} `json:"usage"`
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(data, &a)
		switch {
		case resp.StatusCode == http.StatusOK:
			rec.Outcome, rec.Tier, rec.Degraded, rec.TraceID, rec.InputTokens = outAnswered, a.Tier, a.Degraded, a.TraceID, a.Usage.Input
		case resp.StatusCode == http.StatusServiceUnavailable && a.Error.Code == "shutting_down":
			return true
		case resp.StatusCode >= 500:
			rec.Outcome, rec.Code, rec.Detail = outError, a.Error.Code, a.Error.Message
		default:
			rec.Outcome, rec.Code, rec.Detail = outRefused, a.Error.Code, a.Error.Message
		}
		return false
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data: ")); ok {
			var f frame
			if json.Unmarshal(data, &f) == nil {
				if f.Type == "error" && f.Code == "shutting_down" && rec.FirstByte == 0 {
					return true
				}
				if r.onFrame(f, rec) {
					return false
				}
			}
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, io.EOF):
				rec.Outcome, rec.Detail = outLost, "the stream ended without a done or error frame"
			default:
				rec.Outcome, rec.Detail = outCut, err.Error()
			}
			return false
		}
	}
}

// wsTurn sends one message over its own WebSocket connection.
func (r *runner) wsTurn(ctx context.Context, in *instance, u user, session, msg, reqID string, rec *TurnRecord) bool {
	h := http.Header{}
	authHeaders(h, u)
	c, resp, err := websocket.Dial(ctx, "ws://"+in.addr+"/ws", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if isDial(err) || (resp != nil && resp.StatusCode == http.StatusServiceUnavailable) {
			return true
		}
		if resp != nil {
			rec.Status = resp.StatusCode
		}
		rec.Outcome, rec.Detail = outCut, err.Error()
		if resp != nil && resp.StatusCode >= 400 && resp.StatusCode < 500 {
			rec.Outcome = outRefused
		}
		if ctx.Err() != nil {
			rec.Outcome = ""
		}
		return false
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	rec.Status = http.StatusSwitchingProtocols
	out, _ := json.Marshal(map[string]string{"action": "sendMessage", "requestId": reqID, "sessionId": session,
		"message": msg, "locale": u.locale, "userId": u.id})
	if err := c.Write(ctx, websocket.MessageText, out); err != nil {
		rec.Outcome, rec.Detail = outCut, err.Error()
		return false
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			if websocket.CloseStatus(err) == websocket.StatusGoingAway && rec.FirstByte == 0 {
				return true
			}
			rec.Outcome, rec.Detail = outCut, err.Error()
			return false
		}
		var f frame
		if json.Unmarshal(data, &f) != nil || (f.RequestID != "" && f.RequestID != reqID) {
			continue
		}
		if f.Type == "error" && f.Code == "shutting_down" && rec.FirstByte == 0 {
			return true
		}
		if r.onFrame(f, rec) {
			_ = c.Close(websocket.StatusNormalClosure, "")
			return false
		}
	}
}

// chatOnce is a JSON turn on one instance, for the probes.
func (r *runner) chatOnce(ctx context.Context, in *instance, u user, session, msg string) TurnRecord {
	rec := r.turn(ctx, u, chanJSON, session, msg, "", in)
	rec.Probe = true
	return rec
}

// messageFor is a message in u's locale.
func messageFor(u user, i int) string {
	m := messages[u.locale]
	return m[i%len(m)]
}
