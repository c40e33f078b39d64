package scenario

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
)

func TestLoopbackOnly(t *testing.T) {
	tests := []struct {
		give string
		ok   bool
	}{
		{"http://127.0.0.1:8080", true},
		{"http://localhost:8080/", true},
		{"http://[::1]:8080", true},
		{"http://10.0.0.5:8080", false},
		{"http://gateway.example.com", false},
		{"http://0.0.0.0:8080", false},
	}
	for _, tt := range tests {
		if err := loopbackOnly(tt.give); (err == nil) != tt.ok {
			t.Errorf("loopbackOnly(%q) = %v; want ok=%v", tt.give, err, tt.ok)
		}
	}
}

// TestInstanceConfigLoads: the config a fleet is started with is valid for
// the gateway, with the fleet's Redis, prefix, keys and limits in it.
func TestInstanceConfigLoads(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Instances: 3, Rate: 20, AdminToken: "tok", Pace: 2, RedisTimeout: 200 * time.Millisecond}.withDefaults()
	in := &instance{id: 1, addr: "127.0.0.1:18080", dir: dir}
	path := filepath.Join(dir, "fmgate.yaml")
	if err := os.WriteFile(path, []byte(instanceConfig(opts, in, "127.0.0.1:16379", "fmgate-scenario-1:")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("generated config: %v", err)
	}
	if cfg.Fleet.Redis != "127.0.0.1:16379" || cfg.Fleet.KeyPrefix != "fmgate-scenario-1:" || cfg.Fleet.Size != 3 ||
		cfg.Server.Addr != in.addr || cfg.RateLimit.User.PerMinute.Burst != probeBurst || cfg.RateLimit.RedisTimeout != 200*time.Millisecond || cfg.Session.RedisTimeout != 200*time.Millisecond {
		t.Fatalf("generated config: fleet %+v addr %s perMinute %+v", cfg.Fleet, cfg.Server.Addr, cfg.RateLimit.User.PerMinute)
	}
	var p1, premium int
	for _, c := range cfg.Auth.Keys {
		if c.Priority == "P1" {
			p1++
		}
		if c.Tier == "premium" {
			premium++
		}
	}
	if p1 == 0 || premium == 0 || cfg.Sim.Models["sonnet"].TTFTMs != 300 {
		t.Fatalf("keys: %d P1, %d premium; sonnet ttft %d", p1, premium, cfg.Sim.Models["sonnet"].TTFTMs)
	}
}

func rec(start, end time.Duration, inst int, outcome string) TurnRecord {
	return TurnRecord{Start: start, FirstByte: start + 100*time.Millisecond, End: end, Instance: inst, Channel: chanWS,
		Priority: "P0", Outcome: outcome, Tier: "sonnet"}
}

func goal(gs []Goal, name string) Goal {
	for _, g := range gs {
		if g.Name == name {
			return g
		}
	}
	return Goal{}
}

func TestEvaluate(t *testing.T) {
	opts := Options{}.withDefaults()
	base := func() *Result {
		r := &Result{Options: opts, Duration: 10 * time.Second,
			Samples:      []Sample{{Turns: 100, Attempts: 104}},
			RateProbe:    RateProbe{Sent: 75, Admitted: 51, Expected: 51.2},
			SessionProbe: SessionProbe{Pairs: 6, Continued: 6},
			Persist:      Persistence{Answered: 100, Found: 100}}
		for i := range 100 {
			r.Turns = append(r.Turns, rec(time.Duration(i)*100*time.Millisecond, time.Duration(i)*100*time.Millisecond+time.Second, i%3, outAnswered))
		}
		return r
	}
	tests := []struct {
		name string
		edit func(*Result)
		goal string
		want Verdict
	}{
		{"all fine", func(*Result) {}, "answered", Pass},
		{"a turn cut by the kill does not count against answered", func(r *Result) {
			r.Turns[50].Outcome = outCut
			r.Marks = []Mark{{At: r.Turns[50].Start + 500*time.Millisecond, Label: "SIGKILL instance 2"}}
		}, "answered", Pass},
		{"two turns cut by the kill end visibly", func(r *Result) {
			r.Turns[50].Outcome = outCut
			r.Marks = []Mark{{At: r.Turns[50].Start + 500*time.Millisecond, Label: "SIGKILL instance 2"}}
		}, "no turn lost", Pass},
		{"a silent end is a lost turn", func(r *Result) { r.Turns[3].Outcome = outLost }, "no turn lost", Fail},
		{"two failed turns miss 99%", func(r *Result) { r.Turns[3].Outcome, r.Turns[4].Outcome = outError, outCut }, "answered", Fail},
		{"an error frame is a 5xx", func(r *Result) { r.Turns[3].Outcome, r.Turns[3].Code = outError, "upstream_failed" }, "no 5xx", Fail},
		{"a 429 is not a 5xx", func(r *Result) { r.Turns[3].Outcome, r.Turns[3].Status = outRefused, 429 }, "no 5xx", Pass},
		{"amplification over 1.1", func(r *Result) { r.Samples[0].Attempts, r.Samples[0].Retries = 120, 20 }, "retry amplification", Fail},
		{"a cascade's hops are not retries", func(r *Result) { r.Samples[0].Attempts = 150 }, "retry amplification", Pass},
		{"rate limit off by 2%", func(r *Result) { r.RateProbe.Admitted = 53; r.RateProbe.Expected = 51 }, "fleet rate-limit accuracy", Fail},
		{"rate limit within one turn", func(r *Result) { r.RateProbe.Admitted = 52; r.RateProbe.Expected = 51.2 }, "fleet rate-limit accuracy", Pass},
		{"a session that did not follow", func(r *Result) { r.SessionProbe.Continued = 5 }, "sessions continue across instances", Fail},
		{"a missing must-persist event", func(r *Result) { r.Persist.Found = 99 }, "no must-persist event lost", Fail},
		{"slow first bytes of P0", func(r *Result) {
			for i := range 5 {
				r.Turns[i].FirstByte = r.Turns[i].Start + 4*time.Second
			}
		}, "p99 time to first byte", Fail},
		{"the primary answers half during the fault", func(r *Result) {
			r.PrimaryShare, r.Marks = 0.35, []Mark{{At: 2 * time.Second, Label: "on"}, {At: 8 * time.Second, Label: "off"}}
			for i := range r.Turns {
				if i%2 == 0 {
					r.Turns[i].Tier = "haiku"
				}
			}
		}, "primary carries its share", Pass},
		{"the primary hands every turn of the fault on", func(r *Result) {
			r.PrimaryShare, r.Marks = 0.35, []Mark{{At: 2 * time.Second, Label: "on"}, {At: 8 * time.Second, Label: "off"}}
			for i := range r.Turns {
				if r.Turns[i].Start >= 2*time.Second && r.Turns[i].Start < 7*time.Second {
					r.Turns[i].Tier = "haiku"
				}
			}
		}, "primary carries its share", Fail},
		// Ten turns inside the marks (20 to 29): two of them the primary's,
		// which a primary at 35% answers one time in four, then none.
		{"a short fault's few turns below the share are luck", shortFault(22), "primary carries its share", Pass},
		{"none of a short fault's turns by the primary is a miss", shortFault(20), "primary carries its share", Fail},
		{"slow first bytes of P2 only", func(r *Result) {
			for i := range 5 {
				r.Turns[i].FirstByte, r.Turns[i].Priority = r.Turns[i].Start+4*time.Second, "P2"
			}
		}, "p99 time to first byte", Pass},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			tt.edit(r)
			if g := goal(evaluate(r), tt.goal); g.Verdict != tt.want {
				t.Fatalf("%s: %s (%s); want %s", tt.goal, g.Verdict, g.Measured, tt.want)
			}
		})
	}
}

func TestReportIsSelfContained(t *testing.T) {
	dir := t.TempDir()
	r := &Result{Name: "primary-outage", About: "x", Options: Options{}.withDefaults(), Duration: 5 * time.Second,
		Marks:   []Mark{{At: 2 * time.Second, Label: "sonnet outage"}},
		Samples: []Sample{{At: time.Second, Turns: 3, Attempts: 3, Breakers: map[string]int{"sonnet": 2}, Saturation: map[string]float64{"sonnet": 0.4}}}}
	for i := range 20 {
		r.Turns = append(r.Turns, rec(time.Duration(i)*200*time.Millisecond, time.Duration(i)*200*time.Millisecond+time.Second, 0, outAnswered))
	}
	r.Goals = evaluate(r)
	if err := writeReport(dir, r.Options, []*Result{r}); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := strings.ReplaceAll(string(page), "http://www.w3.org/2000/svg", "")
	if strings.Contains(html, "http://") || strings.Contains(html, "https://") || strings.Contains(html, "<script") || strings.Contains(html, "<link") {
		t.Error("report.html loads something from elsewhere")
	}
	if strings.Count(html, "<svg") != 6 || !strings.Contains(html, "sonnet outage") {
		t.Errorf("report.html: %d charts, fault mark present %v", strings.Count(html, "<svg"), strings.Contains(html, "sonnet outage"))
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "| p99 time to first byte |") {
		t.Errorf("report.md lacks the goal table:\n%s", md)
	}
}

func TestLabel(t *testing.T) {
	tests := []struct{ labels, name, want string }{
		{`{breaker="sonnet",state="open"}`, "state", "open"},
		{`{breaker="sonnet",state="open"}`, "breaker", "sonnet"},
		{`{model="haiku",kind="tpm"}`, "kind", "tpm"},
		{`{model="haiku"`, "kind", ""},
		{`{model="unterminated}`, "model", ""},
	}
	for _, tt := range tests {
		if got := label(tt.labels, tt.name); got != tt.want {
			t.Errorf("label(%s, %s) = %q; want %q", tt.labels, tt.name, got, tt.want)
		}
	}
}

// shortFault marks a fault around turns 20 to 29 of TestEvaluate's run,
// from turn handedOn on answered by the fallback tier.
func shortFault(handedOn int) func(*Result) {
	return func(r *Result) {
		r.PrimaryShare, r.Marks = 0.35, []Mark{{At: 2 * time.Second, Label: "on"}, {At: 3900 * time.Millisecond, Label: "off"}}
		for i := handedOn; i < 30; i++ {
			r.Turns[i].Tier = "haiku"
		}
	}
}

func TestBinomialAtMost(t *testing.T) {
	for _, tt := range []struct {
		k, n int
		p    float64
		want float64
	}{
		{1, 4, 0.35, 0.5630},   // 0.65⁴ + 4·0.35·0.65³
		{0, 10, 0.35, 0.01346}, // 0.65¹⁰
		{2, 10, 0.35, 0.2616},
		{147, 447, 0.35, 0.1877},
		{1740, 5000, 0.35, 0.3896}, // (1-p)^n alone underflows
		{1650, 5000, 0.35, 0.001528},
		{4, 4, 0.35, 1},
		{0, 3, 1, 0},
		{0, 3, 0, 1},
	} {
		if got := binomialAtMost(tt.k, tt.n, tt.p); math.Abs(got-tt.want) > 5e-4 {
			t.Errorf("P(X ≤ %d | n=%d, p=%v) = %.4f, want %.4f", tt.k, tt.n, tt.p, got, tt.want)
		}
	}
}
