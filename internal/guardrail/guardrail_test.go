package guardrail

import (
	"strings"
	"testing"
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
