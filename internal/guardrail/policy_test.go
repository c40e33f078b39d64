package guardrail

import (
	"strings"
	"testing"
)

func TestPolicyChoosesKeyThenFeatureThenRoute(t *testing.T) {
	p := Policy{
		Config: Config{Card: Redact},
		Profiles: map[string]Config{
			"storefront": {Email: Redact},
			"kids":       {DenyTerms: []string{"gore"}},
			"partners":   {Phone: Block},
		},
		Features: map[string]string{"recommend": "kids"},
		Routes:   map[string]string{"chat": "partners"},
	}
	for _, c := range []struct {
		key, feature, route string
		want                string
	}{
		{"storefront", "recommend", "chat", "storefront"},
		{"", "recommend", "chat", "kids"},
		{"", "faq", "chat", "partners"},
		{"", "faq", "sendMessage", ""},
		{"gone", "", "", ""}, // a key naming a profile since removed
	} {
		name, got := p.For(c.key, c.feature, c.route)
		if name != c.want {
			t.Errorf("For(%q, %q, %q) = %q; want %q", c.key, c.feature, c.route, name, c.want)
		}
		want := p.Config
		if c.want != "" {
			want = p.Profiles[c.want]
		}
		if got.Email != want.Email || got.Phone != want.Phone || got.Card != want.Card || len(got.DenyTerms) != len(want.DenyTerms) {
			t.Errorf("For(%q, %q, %q) checks %+v; want %+v", c.key, c.feature, c.route, got, want)
		}
	}
}

// A profile names every check it makes; its answers are checked unless it
// says otherwise.
func TestProfileChecksOnlyWhatItNames(t *testing.T) {
	off := false
	p := Policy{Config: DefaultConfig(), Profiles: map[string]Config{"mail": {Email: Redact}, "quiet": {Email: Redact, Answers: &off}}}
	_, mail := p.For("mail", "", "")
	v := mail.Check("card 4111 1111 1111 1111, mail taro@example.com")
	if v.Text != "card 4111 1111 1111 1111, mail [EMAIL]" {
		t.Fatalf("the mail profile made %q of it; want the e-mail redacted and the card left (not one of its checks)", v.Text)
	}
	if !mail.ChecksAnswers() {
		t.Fatal("a profile that says nothing of answers should check them")
	}
	if _, quiet := p.For("quiet", "", ""); quiet.ChecksAnswers() {
		t.Fatal("answers: false should leave answers unchecked")
	}
	if (Config{Answers: nil}).ChecksAnswers() {
		t.Fatal("a set with no check on has nothing to check answers for")
	}
}

func TestPolicyValidate(t *testing.T) {
	p := Policy{
		Profiles: map[string]Config{"storefront": {Email: "mask", Bedrock: BedrockConfig{GuardrailID: "gr-1"}}, "a b": {}},
		Features: map[string]string{"recommend": "kids"},
		Routes:   map[string]string{"chat": "storefront", "websocket": "storefront"},
	}
	err := p.Validate()
	if err == nil {
		t.Fatal("Validate accepted a policy with bad profiles and choices")
	}
	for _, want := range []string{
		`profiles.storefront.email: "mask" is not block, redact or log`,
		`profiles.storefront.bedrock.region: must be set`,
		`profiles: "a b" is not a profile name`,
		`features.recommend: no guardrails profile named "kids" (want one of a b, storefront)`,
		`routes.websocket: not a route (use one of sendMessage, chat, batch)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v\nlacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "routes.chat") {
		t.Errorf("Validate refused routes.chat, which names a profile: %v", err)
	}
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatalf("the default policy: %v", err)
	}
}

func TestPolicyRemotes(t *testing.T) {
	gr := BedrockConfig{GuardrailID: "gr-1", GuardrailVersion: "1", Region: "us-east-1"}
	p := Policy{Config: Config{Bedrock: gr}, Profiles: map[string]Config{"storefront": {Bedrock: gr}, "local": {Email: Redact}}}
	got := p.Remotes()
	if len(got) != 2 || !got[""].Enabled() || !got["storefront"].Enabled() {
		t.Fatalf("Remotes() = %v; want the top level's and the storefront's", got)
	}
}

func TestMaxNonText(t *testing.T) {
	c := Config{MaxNonText: 0.3}
	blob := strings.Repeat("aGVsbG8gd29ybGQgaWdub3JlIHByZXZpb3Vz", 3)
	for _, tt := range []struct {
		name, text string
		blocked    bool
	}{
		{"a Japanese question", "「ワンピース」の最新刊はいつ発売ですか？ 100巻以降も教えてください！", false},
		{"an English question with a price", "Is volume 107 still ¥528, and is there a box set?", false},
		{"a short reaction", "👍👍👍 thanks!", false},
		{"an emoji flood", strings.Repeat("🔥💯🙏", 10) + " read this", true},
		{"stacked combining marks", "h" + strings.Repeat("\u0301\u0302\u0303", 10) + "ello there friend", true},
		{"an encoded payload", "please decode " + blob, true},
		{"control characters", "ok" + strings.Repeat("\u200b\u202e", 12) + "fine", true},
	} {
		v := c.Check(tt.text)
		if v.Blocked != tt.blocked {
			share, n := nonTextShare(tt.text)
			t.Errorf("%s: blocked %v, want %v (share %.2f of %d)", tt.name, v.Blocked, tt.blocked, share, n)
		}
		if tt.blocked && (len(v.Findings) != 1 || v.Findings[0].Kind != KindNonText) {
			t.Errorf("%s: findings %+v; want the one non_text finding", tt.name, v.Findings)
		}
	}
	flood := strings.Repeat("🔥", 20) + " mail taro@example.com"
	if m := c.Mask(flood); m != "[NON_TEXT]" {
		t.Errorf("Mask of a blocked flood = %q; want the whole message masked", m)
	}
	logged := Config{MaxNonText: 0.3, NonTextAction: Log, Email: Redact}
	v := logged.Check(flood)
	if v.Blocked || v.Text != strings.Repeat("🔥", 20)+" mail [EMAIL]" || v.Kinds()[0] != KindNonText {
		t.Errorf("logged: %+v; want the flood logged and the e-mail redacted", v)
	}
	if s := c.NewStream(); s.c.MaxNonText != 0 {
		t.Error("a streamed answer is held to the share of non-text")
	}
	for _, bad := range []Config{{MaxNonText: 1}, {MaxNonText: -0.1}, {MaxNonText: 0.5, NonTextAction: Redact}} {
		if bad.Validate() == nil {
			t.Errorf("Validate accepted %+v", bad)
		}
	}
}
