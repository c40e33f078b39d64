package config

import (
	"errors"
	"strings"
	"testing"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("the MangaAssist profile does not validate: %v", err)
	}
}

func TestParseListsEveryProblem(t *testing.T) {
	_, err := Parse(strings.NewReader(`
server:
  maxMessageBytes: 0
locales: [ja, fr]
deadline:
  attempt: 5s
rateLimit:
  premiumMultiplier: -1
retry:
  base: 20s
`))
	var p *Problems
	if !errors.As(err, &p) {
		t.Fatalf("err %v, want *Problems", err)
	}
	for _, want := range []string{"server.maxMessageBytes", "locales[1]", "deadline.attempt", "rateLimit.premiumMultiplier", "retry."} {
		found := false
		for _, line := range p.List {
			if strings.HasPrefix(line, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("no problem reported for %s in:\n%s", want, strings.Join(p.List, "\n"))
		}
	}
}

func TestParseRefusesUnknownFields(t *testing.T) {
	_, err := Parse(strings.NewReader("server:\n  adress: 1.2.3.4:80\n"))
	var p *Problems
	if !errors.As(err, &p) || !strings.Contains(p.Error(), "adress") {
		t.Fatalf("err %v, want the unknown field named", err)
	}
}

func TestParseOverridesDefaults(t *testing.T) {
	cfg, err := Parse(strings.NewReader("server:\n  addr: 0.0.0.0:9090\nsim:\n  models:\n    sonnet: {ttftMs: 100, tokensPerSecond: 50}\n    haiku: {ttftMs: 50, tokensPerSecond: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.Addr != "0.0.0.0:9090" || cfg.Sim.Models["sonnet"].TTFTMs != 100 || cfg.Server.MaxMessageBytes != 8192 {
		t.Fatalf("parsed %+v", cfg.Server)
	}
}
