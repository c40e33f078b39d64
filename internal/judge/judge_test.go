package judge

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    float64
		wantErr string
	}{
		{"plain", `{"helpfulness":0.9,"correctness":0.8,"language_match":1,"safety":1}`, 0.93, ""},
		{"in prose", "Here is my grade:\n```json\n{\"helpfulness\":0.5,\"correctness\":0.5,\"language_match\":0,\"safety\":1}\n```", 0.5, ""},
		{"missing criterion", `{"helpfulness":0.9,"correctness":0.8,"safety":1}`, 0, "language_match"},
		{"out of range", `{"helpfulness":1.5,"correctness":0.8,"language_match":1,"safety":1}`, 0, "helpfulness"},
		{"no json", "I think it is fine.", 0, "no JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.give)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || s.Overall() != tt.want {
				t.Fatalf("overall %v err %v, want %v", s.Overall(), err, tt.want)
			}
		})
	}
}

func TestMessageRoundTrips(t *testing.T) {
	c := Case{Question: "ワンピースの最新刊は？", Answer: "最新刊は第110巻、税込594円です。", Source: "model", Context: "ONE PIECE 110 ¥594"}
	got, ok := ParseMessage(Message(c))
	if !ok || got != c {
		t.Fatalf("round trip: %+v %v", got, ok)
	}
	long := Case{Question: "q", Answer: strings.Repeat("あ", 3000), Source: "faq"}
	msg := Message(long)
	if len(msg) > 3*MaxPart {
		t.Fatalf("message of %d bytes for a long answer", len(msg))
	}
	back, ok := ParseMessage(msg)
	if !ok || !strings.HasSuffix(back.Answer, "…") || back.Source != "faq" {
		t.Fatalf("long answer not cut cleanly: ok=%v source=%q", ok, back.Source)
	}
}

func TestGradeRanksWhatAJudgeWould(t *testing.T) {
	q := "Can you recommend a fantasy manga?"
	model := Grade(Case{Question: q, Answer: "Try Frieren: Beyond Journey's End, a gentle fantasy about time and memory.", Source: "model"}).Overall()
	faq := Grade(Case{Question: q, Answer: "Our staff picks are listed on the recommendations page of the store.", Source: "faq"}).Overall()
	graceful := Grade(Case{Question: q, Answer: "I'm having a bit of trouble right now, but I'm still here!", Source: "graceful"}).Overall()
	wrongLang := Grade(Case{Question: q, Answer: "ファンタジーなら『葬送のフリーレン』がおすすめです。", Source: "model"})
	if !(model > faq && faq > graceful) {
		t.Fatalf("model %.2f, faq %.2f, graceful %.2f: want model > faq > graceful", model, faq, graceful)
	}
	if wrongLang.LanguageMatch != 0 || wrongLang.Overall() >= model {
		t.Fatalf("answer in the wrong language scored %+v", wrongLang)
	}
	leak := Grade(Case{Question: q, Answer: "Your card 4111 1111 1111 1111 is on file; try Frieren.", Source: "model"})
	if leak.Safety >= 0.5 {
		t.Fatalf("a card number in the answer: safety %.2f", leak.Safety)
	}
	ctx := "Frieren vol. 13 ¥594 in stock"
	if with, without := Grade(Case{Question: q, Answer: "Frieren volume 13 is in stock.", Source: "model", Context: ctx}),
		Grade(Case{Question: q, Answer: "Maybe try something else.", Source: "model", Context: ctx}); with.Correctness <= without.Correctness {
		t.Fatalf("answer using the context %.2f, ignoring it %.2f", with.Correctness, without.Correctness)
	}
}

func TestSampleDropsWhenQuotaSaturates(t *testing.T) {
	c := DefaultConfig()
	r := rand.New(rand.NewPCG(1, 2))
	count := func(sat float64) int {
		n := 0
		for range 200000 {
			if c.Sample(r, sat) {
				n++
			}
		}
		return n
	}
	normal, saturated := count(0.5), count(0.9)
	if normal < 1800 || normal > 2200 {
		t.Fatalf("%d of 200000 sampled at 50%% saturation, want about 2000 (1%%)", normal)
	}
	if saturated < 320 || saturated > 480 {
		t.Fatalf("%d of 200000 sampled at 90%% saturation, want about 400 (0.2%%)", saturated)
	}
}
