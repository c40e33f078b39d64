package guardrail

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestFindsAndActs(t *testing.T) {
	all := Config{Email: Redact, Phone: Redact, Card: Block, MyNumber: Redact, PostalCode: Log, DenyTerms: []string{"Secret Project"}, DenyAction: Log}
	tests := []struct {
		name, text string
		kinds      []string
		text2      string
		blocked    bool
	}{
		{"email", "mail me at taro.yamada@example.co.jp please", []string{KindEmail}, "mail me at [EMAIL] please", false},
		{"jp mobile, full width", "電話は０９０－１２３４－５６７８です", []string{KindPhone}, "電話は[PHONE]です", false},
		{"jp landline", "call 03-1234-5678", []string{KindPhone}, "call [PHONE]", false},
		{"international", "or +81 90 1234 5678", []string{KindPhone}, "or [PHONE]", false},
		{"card, Luhn valid", "card 4111 1111 1111 1111 ok", []string{KindCard}, "card 4111 1111 1111 1111 ok", true},
		{"card, Luhn invalid", "order 4111 1111 1111 1112", nil, "order 4111 1111 1111 1112", false},
		{"my number, valid check digit", "番号は123456789018です", []string{KindMyNumber}, "番号は[MY_NUMBER]です", false},
		{"my number, wrong check digit", "番号は123456789012です", nil, "番号は123456789012です", false},
		{"postal code, logged", "〒150-0001 東京都", []string{KindPostalCode}, "〒150-0001 東京都", false},
		{"deny term, any case", "about the SECRET project", []string{KindDenied}, "about the SECRET project", false},
		{"ISBN is no phone", "ISBN 9784088725093", nil, "ISBN 9784088725093", false},
		{"volume and price", "One Piece vol. 105 costs 528 yen", nil, "One Piece vol. 105 costs 528 yen", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := all.Check(tt.text)
			if strings.Join(v.Kinds(), ",") != strings.Join(tt.kinds, ",") || v.Text != tt.text2 || v.Blocked != tt.blocked {
				t.Fatalf("Check(%q) = kinds %v, text %q, blocked %v; want %v, %q, %v", tt.text, v.Kinds(), v.Text, v.Blocked, tt.kinds, tt.text2, tt.blocked)
			}
		})
	}
}

func TestOffKindsAreNotChecked(t *testing.T) {
	v := Config{Card: Redact}.Check("taro@example.com 090-1234-5678")
	if len(v.Findings) != 0 || v.Text != "taro@example.com 090-1234-5678" {
		t.Fatalf("%+v", v)
	}
	if (Config{}).Enabled() {
		t.Fatal("an empty config is enabled")
	}
}

func TestValidate(t *testing.T) {
	err := Config{Email: "mask", DenyTerms: []string{" "}}.Validate()
	if err == nil || !strings.Contains(err.Error(), `email: "mask" is not block, redact or log`) || !strings.Contains(err.Error(), "denyTerms[0]") {
		t.Fatalf("err = %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func FuzzCheck(f *testing.F) {
	f.Add("０９０－１２３４－５６７８ taro@example.com 4111111111111111")
	f.Add("〒150-0001 ＡＢＣ＠ｅｘａｍｐｌｅ．ｃｏｍ")
	f.Fuzz(func(t *testing.T, s string) {
		v := Config{Email: Redact, Phone: Redact, Card: Redact, MyNumber: Redact, PostalCode: Redact, DenyTerms: []string{"x"}, DenyAction: Redact}.Check(s)
		for _, f := range v.Findings {
			if f.Start < 0 || f.End > len(s) || f.Start >= f.End {
				t.Fatalf("finding %+v out of %d bytes", f, len(s))
			}
		}
	})
}

// A streamed answer is let through piece by piece, each finding redacted
// or blocked whole wherever the pieces split it, and nothing else held
// back longer than the next piece.
func TestStreamSplitsNoFinding(t *testing.T) {
	c := Config{Email: Redact, Phone: Redact, Card: Block, DenyTerms: []string{"海賊版"}, DenyAction: Redact}
	answer := "Call ０９０－１２３４－５６７８ or write taro@example.com; 海賊版 is not sold. Vol. 105 costs 528 yen."
	want := "Call [PHONE] or write [EMAIL]; [DENIED_TERM] is not sold. Vol. 105 costs 528 yen."
	for size := 1; size <= len(answer); size++ {
		s := c.NewStream()
		var got strings.Builder
		for i := 0; i < len(answer); i += size {
			out, v := s.Write(answer[i:min(i+size, len(answer))])
			if v.Blocked {
				t.Fatalf("pieces of %d: blocked", size)
			}
			got.WriteString(out)
		}
		out, _ := s.Flush()
		got.WriteString(out)
		if got.String() != want {
			t.Fatalf("pieces of %d bytes: let through %q, want %q", size, got.String(), want)
		}
	}
	// Plain prose is let through at once, but for its last word (and,
	// with deny terms, the bytes a term could start in).
	s := Config{Email: Redact, Phone: Redact, Card: Block}.NewStream()
	if out, _ := s.Write("おすすめは「ワンピース」です。 Enjoy reading"); out != "おすすめは「ワンピース」です。 Enjoy " {
		t.Errorf("prose let through as %q", out)
	}
	// Only what the kinds checked could begin is held: with numbers
	// alone checked, a word is let through at once.
	s = Config{Card: Redact, MyNumber: Redact}.NewStream()
	if out, _ := s.Write("Hi, I am MangaAssist"); out != "Hi, I am MangaAssist" {
		t.Errorf("with only numbers checked, prose let through as %q", out)
	}
	if out, _ := s.Write(" — order 4111 1111"); out != " — order " {
		t.Errorf("a number's start let through as %q", out)
	}
}

func TestStreamBlocksACardSplitAcrossPieces(t *testing.T) {
	s := Config{Card: Block}.NewStream()
	var sent strings.Builder
	for _, p := range []string{"Your card 4111 11", "11 1111 1111 was", " charged."} {
		out, v := s.Write(p)
		if v.Blocked {
			if strings.Contains(sent.String(), "4111") {
				t.Fatalf("part of the card was let through before the block: %q", sent.String())
			}
			return
		}
		sent.WriteString(out)
	}
	t.Fatalf("the card was never blocked; let through %q", sent.String())
}

// TestBuiltinChecker: the built-in checks as a Checker give the verdict
// Check gives, and never fail.
func TestBuiltinChecker(t *testing.T) {
	c := Config{Email: Redact, Card: Block}
	for _, text := range []string{"mail taro@example.com", "card 4111 1111 1111 1111", "One Piece vol. 105"} {
		v, err := c.Checker().Check(context.Background(), text)
		want := c.Check(text)
		if err != nil || v.Text != want.Text || v.Blocked != want.Blocked || strings.Join(v.Kinds(), ",") != strings.Join(want.Kinds(), ",") {
			t.Fatalf("Checker().Check(%q) = %+v, %v; want %+v", text, v, err, want)
		}
	}
}

// TestBedrockConfigValidate: an empty remote check is off and valid; a
// set one names each field that is wrong.
func TestBedrockConfigValidate(t *testing.T) {
	if err := (BedrockConfig{}).Validate(); err != nil {
		t.Fatalf("off: %v", err)
	}
	ok := BedrockConfig{GuardrailID: "gr-1", GuardrailVersion: "1", Region: "us-east-1"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal: %v", err)
	}
	if f := ok.Filled(); f.Timeout != DefaultRemoteTimeout || f.OnError != OnErrorOpen || f.Source != SourceInput {
		t.Fatalf("defaults %+v", f)
	}
	bad := BedrockConfig{Timeout: time.Minute, OnError: "maybe", PricePer1kTextUnits: -1}
	err := bad.Validate()
	for _, field := range []string{"bedrock.guardrailId", "bedrock.guardrailVersion", "bedrock.region", "bedrock.timeout", "bedrock.onError", "bedrock.pricePer1kTextUnits"} {
		if err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("err %v does not name %s", err, field)
		}
	}
}

func TestMask(t *testing.T) {
	c := Config{Email: Block, Card: Redact, Phone: Log}
	got := c.Mask("mail a@example.com, card 4111 1111 1111 1111, call 090-1234-5678")
	if want := "mail [EMAIL], card [CARD], call 090-1234-5678"; got != want {
		t.Fatalf("Mask = %q, want %q", got, want)
	}
	if got := (Config{}).Mask("a@example.com"); got != "a@example.com" {
		t.Fatalf("no check on: %q", got)
	}
}
