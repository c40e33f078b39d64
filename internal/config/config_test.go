package config

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/guardrail"
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

// TestParseNamesFieldPaths: every problem names its field by path, suggests
// the name meant, speaks YAML's types, and a sim model that is no tier is
// refused.
func TestParseNamesFieldPaths(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"misspelt field", "server:\n  adr: x\n", "server.adr: unknown field (did you mean addr?)"},
		{"misspelt nested", "deadline:\n  firstbyte: 3s\n", "deadline.firstbyte: unknown field (did you mean firstByte?)"},
		{"misspelt top level", "modles: []\n", "modles: unknown field (did you mean models?)"},
		{"unrelated name", "server:\n  colour: blue\n", "server.colour: unknown field"},
		{"inside a map", "sim:\n  models:\n    sonnet: {tokensPerSecnd: 5}\n", "sim.models.sonnet.tokensPerSecnd: unknown field (did you mean tokensPerSecond?)"},
		{"wrong kind", "server:\n  maxMessageBytes: lots\n", `server.maxMessageBytes: must be a whole number, not "lots"`},
		{"bad duration", "server:\n  drainTimeout: forever\n", `server.drainTimeout: must be a duration such as 10s or 500ms, not "forever"`},
		{"hybrid without embeddings", "embeddings: []\ncatalog:\n  hybrid: true\n", "catalog.hybrid: true needs an embedding tier"},
		{"sim model that is no tier", "sim:\n  models:\n    opus: {ttftMs: 100}\n", "sim.models.opus: no model tier is named opus (models are sonnet, haiku; embedding tiers are titan-embed, cohere-embed)"},
		{"idle outside the hierarchy", "deadline:\n  idle: 5m\n", "deadline.idle: must be > 0 and shorter than stream.maxDuration"},
		{"batch bounds", "batch:\n  maxJobs: 0\n", "batch.maxJobs: must be > 0"},
		{"collector target too low", "server:\n  gcPercent: 20\n", "server.gcPercent: must be at least 50, or 0 for the default (100)"},
		{"memory limit that is no size", "server:\n  memoryLimit: lots\n", `server.memoryLimit: "lots" is not a size: give bytes or a number with KiB, MiB or GiB (e.g. 768MiB), "auto" or "off"`},
		{"memory limit in the wrong unit", "server:\n  memoryLimit: 2GB\n", `server.memoryLimit: "2GB" is not a size`},
		{"memory limit too small", "server:\n  memoryLimit: 8MiB\n", `server.memoryLimit: "8MiB" is below 64 MiB`},
		{"allowed host with a port", "server:\n  allowedHosts: [gw.example.com, \"localhost:8080\"]\n", `server.allowedHosts[1]: "localhost:8080": name the host without a port`},
		{"allowed host that is no pattern", "server:\n  allowedHosts: [\"[a-\"]\n", `server.allowedHosts[0]: "[a-" is not a host name or pattern`},
		{"empty allowed host", "server:\n  allowedHosts: [\"\"]\n", `server.allowedHosts[0]: "" is not a host name or pattern`},
		{"no images per request", "server:\n  images: {maxPerRequest: 0}\n", "server.images.maxPerRequest: must be > 0"},
		{"negative image size", "server:\n  images: {maxBytes: -1}\n", "server.images.maxBytes: must be > 0"},
		{"image hosts: any", "server:\n  images: {allowedHosts: [\"*\"]}\n", `server.images.allowedHosts[0]: "*" would let any client`},
		{"image hosts: a URL", "server:\n  images: {allowedHosts: [\"https://img.example.com/\"]}\n", `server.images.allowedHosts[0]: "https://img.example.com/": name the host alone`},
		{"image hosts: a port", "server:\n  images: {allowedHosts: [\"img.example.com:443\"]}\n", `server.images.allowedHosts[0]: "img.example.com:443": name the host without a port`},
		{"image hosts: a top-level wildcard", "server:\n  images: {allowedHosts: [\"*.com\"]}\n", `server.images.allowedHosts[0]: "*.com" is not a host name`},
		{"image hosts: a wildcard inside", "server:\n  images: {allowedHosts: [\"img.*.example.com\"]}\n", `server.images.allowedHosts[0]: "img.*.example.com" is not a host name`},
		{"image fetch timeout", "server:\n  images: {fetchTimeout: 0s}\n", "server.images.fetchTimeout: must be > 0"},
		{"unknown capability", "models:\n  - {name: sonnet, provider: sim, modelId: s, contextWindow: 1000, maxOutputTokens: 10, capabilities: [text, eyes]}\n", `models[0].capabilities: "eyes" is not a capability (use one of text, tools, prefill, top_k, seed, vision, thinking, guardrails, json)`},
		{"bedrock guardrail without a region", "guardrails:\n  bedrock: {guardrailId: gr-1, guardrailVersion: \"1\"}\n", "guardrails.bedrock.region: must be set"},
		{"bedrock guardrail without an id", "guardrails:\n  bedrock: {region: us-east-1, guardrailVersion: \"1\"}\n", "guardrails.bedrock.guardrailId: must be set"},
		{"bedrock guardrail onError", "guardrails:\n  bedrock: {guardrailId: gr-1, guardrailVersion: \"1\", region: us-east-1, onError: maybe}\n", `guardrails.bedrock.onError: "maybe" is not open or closed`},
		{"bedrock guardrail timeout", "guardrails:\n  bedrock: {guardrailId: gr-1, guardrailVersion: \"1\", region: us-east-1, timeout: 1m}\n", "guardrails.bedrock.timeout: must be between"},
		{"bedrock guardrail source", "guardrails:\n  bedrock: {guardrailId: gr-1, guardrailVersion: \"1\", region: us-east-1, source: output}\n", `guardrails.bedrock.source: "output" is not input`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.give))
			var p *Problems
			if !errors.As(err, &p) {
				t.Fatalf("err %v, want *Problems", err)
			}
			found := false
			for _, line := range p.List {
				if strings.HasPrefix(line, tt.want) {
					found = true
				}
				if strings.Contains(line, "config.") || strings.Contains(line, "line ") {
					t.Errorf("problem %q shows Go types or line numbers", line)
				}
			}
			if !found {
				t.Fatalf("problems:\n%s\nwant %q", strings.Join(p.List, "\n"), tt.want)
			}
		})
	}
	if _, err := Parse(strings.NewReader("sim:\n  models:\n    sonnet: {ttftMs: 100}\n")); err != nil {
		t.Fatalf("a tier's sim settings refused: %v", err)
	}
	if _, err := Parse(strings.NewReader("server:\n  allowedHosts: [gw.example.com, \"*.example.com\", \"*\", \"::1\", \"[::1]\"]\n")); err != nil {
		t.Fatalf("allowed hosts refused: %v", err)
	}
	c, err := Parse(strings.NewReader("server:\n  images: {allowedHosts: [img.example.com, \"*.cdn.example.com\", 203.0.113.7, \"[2001:db8::1]\", localhost]}\n"))
	if err != nil {
		t.Fatalf("image hosts refused: %v", err)
	}
	if c.Server.Images.FetchTimeout != 5*time.Second {
		t.Fatalf("server.images.fetchTimeout = %v, want the 5s default", c.Server.Images.FetchTimeout)
	}
}

// TestHostPatterns: with server.allowedHosts empty, the demo profile (a
// trusted user header and no API keys) answers loopback names only and any
// other profile any name; set, it is the list.
func TestHostPatterns(t *testing.T) {
	keyed := Default()
	keyed.Auth.Keys = map[string]Caller{"sk-1": {UserID: "u1"}}
	untrusted := Default()
	untrusted.Auth.TrustUserHeader = false
	listed := Default()
	listed.Server.AllowedHosts = []string{"gw.example.com"}
	tests := []struct {
		name string
		give Config
		want []string
	}{
		{"demo", Default(), []string{"localhost", "*.localhost", "127.0.0.1", "::1"}},
		{"api keys", keyed, nil},
		{"no trusted header", untrusted, nil},
		{"listed", listed, []string{"gw.example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.give.HostPatterns(); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("HostPatterns() = %q, want %q", got, tt.want)
			}
		})
	}
}

// FuzzParse: no YAML makes Parse panic, and a refusal always lists problems.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"server:\n  adr: x\n", "sim:\n  models:\n    a: {ttftMs: [1]}\n", "models:\n  - {name: a}\n", "&a [*a]", "server: !!binary x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := Parse(strings.NewReader(s))
		var p *Problems
		if err != nil && errors.As(err, &p) && len(p.List) == 0 {
			t.Fatalf("refused with no problem listed: %q", s)
		}
	})
}

// TestBreakerEntryKeepsDefaults: a breaker set in the file with only some
// fields keeps its default's values for the rest (a map entry is decoded
// whole, which would otherwise leave them zero and invalid).
func TestBreakerEntryKeepsDefaults(t *testing.T) {
	cfg, err := Parse(strings.NewReader("breakers:\n  search: {failureThreshold: 7}\n  other: {openTimeout: 5s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	search, want := cfg.Breakers["search"], breaker.Defaults()["search"]
	want.FailureThreshold = 7
	if !reflect.DeepEqual(search, want) {
		t.Errorf("search breaker %+v; want %+v", search, want)
	}
	other, wantOther := cfg.Breakers["other"], breaker.DefaultConfig()
	wantOther.OpenTimeout = 5 * time.Second
	if !reflect.DeepEqual(other, wantOther) {
		t.Errorf("other breaker %+v; want %+v", other, wantOther)
	}
	if _, err := Parse(strings.NewReader("breakers:\n  search: {failureRate: 1.5}\n")); err == nil || !strings.Contains(err.Error(), "breakers.search.failureRate") {
		t.Errorf("an invalid field set in the file: %v; want it reported", err)
	}
}

// A model priced by its input and output alone pays each vendor's
// published ratios for its prompt cache: reads a tenth of input on
// Anthropic, Bedrock and the simulator, a half on OpenAI; five-minute
// writes 1.25× input and one-hour writes 2× (OpenAI bills no writes:
// input); prices set in the file win.
func TestModelPriceDefaultsTheCacheClasses(t *testing.T) {
	tests := []struct {
		name                   string
		give                   Model
		wantRead, wantW, want1 float64
	}{
		{"anthropic", Model{Provider: "anthropic", InputPerMTok: 3}, 0.3, 3.75, 6},
		{"bedrock", Model{Provider: "bedrock", InputPerMTok: 3}, 0.3, 3.75, 6},
		{"sim", Model{Provider: "sim", InputPerMTok: 3}, 0.3, 3.75, 6},
		{"openai", Model{Provider: "openai", InputPerMTok: 0.15}, 0.075, 0.15, 0.15},
		{"set in the file", Model{Provider: "openai", InputPerMTok: 2, CachedInputPerMTok: 0.5, CacheWritePerMTok: 2.5, CacheWrite1hPerMTok: 4}, 0.5, 2.5, 4},
	}
	for _, tt := range tests {
		p := tt.give.Price()
		if math.Abs(p.CachedInputPerMTok-tt.wantRead) > 1e-12 || math.Abs(p.CacheWritePerMTok-tt.wantW) > 1e-12 ||
			math.Abs(p.CacheWrite1hPerMTok-tt.want1) > 1e-12 || p.InputPerMTok != tt.give.InputPerMTok {
			t.Errorf("%s: price %+v; want cache reads at %v, writes at %v and one-hour writes at %v", tt.name, p, tt.wantRead, tt.wantW, tt.want1)
		}
	}
}

// TestSyntaxErrorsNameTheLine: a YAML syntax error names the line where the
// file stops being YAML, not the line where the mapping around it starts.
func TestSyntaxErrorsNameTheLine(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"list item among keys", "server:\n  addr: x\nprompt:\n  name: p\n  - system\n", "YAML syntax: line 5: did not find expected key"},
		{"key indented too little", "server:\n  addr: x\nprompt:\n  name: p\n system: hi\n", "YAML syntax: line 5: did not find expected key"},
		{"key indented too little, deeper", "server:\n  addr: x\n  drainTimeout: 30s\n  bodyTimeout: 10s\n bad: 1\n", "YAML syntax: line 5: did not find expected key"},
		{"key indented too far", "locales: [ja, en]\nserver:\n  addr: x\n  publicMetrics: false\n    drainTimeout: 30s\n", "YAML syntax: line 5: mapping values are not allowed in this context"},
		{"tab for indentation", "server:\n  addr: x\nprompt:\n  name: p\n\tsystem: hi\n", "YAML syntax: line 5: found a tab character that violates indentation"},
		{"missing colon", "server:\n  addr: x\nprompt:\n  name: p\nsystem hi\n", "YAML syntax: line 5: could not find expected ':'"},
		{"quote left open where it opens", "server:\n  addr: x\nprompt:\n  name: 'p\n  system: hi\n", "YAML syntax: line 4: found unexpected end of stream"},
		{"error after a list over lines", "locales: [ja,\n  en]\nprompt:\n  name: p\n  - system\n", "YAML syntax: line 5: did not find expected key"},
		{"windows line ends", "server:\r\n  addr: x\r\nprompt:\r\n  name: p\r\n  - system\r\n", "YAML syntax: line 5: did not find expected key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fmgate.yaml")
			if err := os.WriteFile(path, []byte(tt.give), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			var p *Problems
			if !errors.As(err, &p) || len(p.List) != 1 || p.List[0] != tt.want {
				t.Fatalf("Load: %v, want the one problem %q", err, tt.want)
			}
		})
	}
}

// A request's model name means a tier by its name, its model id or one of
// its aliases; a Bedrock inference profile or ARN by the id inside it.
func TestResolveModel(t *testing.T) {
	c := Default()
	tests := []struct{ give, want string }{
		{"sonnet", "sonnet"},
		{"anthropic.claude-3-haiku-20240307-v1:0", "haiku"},
		{"claude-3-5-sonnet-latest", "sonnet"},
		{"claude-3-5-haiku-latest", "haiku"},
		{"anthropic.claude-3-5-sonnet-20240620-v1:0", "sonnet"},
		{"us.anthropic.claude-3-5-haiku-20241022-v1:0", "haiku"},
		{"eu.anthropic.claude-3-sonnet-20240229-v1:0", "sonnet"},
		{"arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0", "haiku"},
		{"arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-20250514-v1:0", "sonnet"},
		{"claude-nowhere", ""},
		{"us.", ""},
		{"", ""},
	}
	for _, tt := range tests {
		m, ok := c.ResolveModel(tt.give)
		if ok != (tt.want != "") || m.Name != tt.want {
			t.Errorf("ResolveModel(%q) = %q, %v; want %q", tt.give, m.Name, ok, tt.want)
		}
	}
}

// An alias that another tier already answers to is refused by name.
func TestAliasesMustNameOneTier(t *testing.T) {
	c := Default()
	c.Models[1].Aliases = append(c.Models[1].Aliases, "claude-3-5-sonnet-latest", "sonnet", "")
	err := c.Validate()
	for _, want := range []string{
		`models[1].aliases[7]: "claude-3-5-sonnet-latest" already names model "sonnet"`,
		`models[1].aliases[8]: "sonnet" already names model "sonnet"`,
		`models[1].aliases[9]: must be a name of 1 to 256 bytes`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to say %s", err, want)
		}
	}
}

// server.tls names what is missing or does not load.
func TestTLSValidation(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		give TLS
		want string
	}{
		{"key without certificate", TLS{KeyFile: junk}, "server.tls.certFile: must be set with server.tls.keyFile"},
		{"certificate without key", TLS{CertFile: junk}, "server.tls.keyFile: must be set with server.tls.certFile"},
		{"client CA without TLS", TLS{ClientCAFile: junk}, "server.tls.clientCAFile: needs server.tls.certFile and keyFile"},
		{"a pair that does not load", TLS{CertFile: junk, KeyFile: junk}, "server.tls: certificate " + junk},
		{"a client CA that is not PEM", TLS{CertFile: junk, KeyFile: junk, ClientCAFile: junk}, "server.tls.clientCAFile: " + junk + " holds no PEM certificate"},
	}
	c := Default()
	c.Models[0].CAFile = junk
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "models[0].caFile: the simulator is called in process") {
		t.Errorf("a caFile on a simulated tier: %v", err)
	}
	c.Models[0].Provider, c.Models[0].Endpoint = "openai", "https://llm.internal/v1"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "models[0].caFile: "+junk+" holds no PEM certificate") {
		t.Errorf("a caFile that is not PEM: %v", err)
	}
	for _, tt := range tests {
		c := Default()
		c.Server.TLS = tt.give
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v; want it to say %s", tt.name, err, tt.want)
		}
	}
}

// TestVisionCapability: every provider can see images unless a tier lists
// its capabilities without "vision", which validation accepts.
func TestVisionCapability(t *testing.T) {
	for _, p := range []string{"sim", "anthropic", "bedrock", "openai"} {
		if !(Model{Provider: p}).Can(CapabilityVision) {
			t.Errorf("a %s tier cannot see images by default", p)
		}
	}
	if (Model{Provider: "sim", Capabilities: []string{CapabilityText, CapabilityTools}}).Can(CapabilityVision) {
		t.Error("a tier listing [text, tools] can see images")
	}
	cfg := Default()
	cfg.Models[0].Capabilities = []string{CapabilityText, CapabilityVision}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("capabilities [text, vision] refused: %v", err)
	}
	if d := Default().Server.Images; d.MaxBytes != 5<<20 || d.MaxPerRequest != 20 || d.MaxSide != 8000 {
		t.Fatalf("image bounds %+v, want 5 MiB, 20 and 8000 px", d)
	}
}

// Payload logs on without their sealing key in the environment: start-up
// and fmgate validate refuse, naming the variable to set.
func TestPayloadLogNeedsItsKey(t *testing.T) {
	cfg := Default()
	cfg.PayloadLog.Enabled = true
	cfg.PayloadLog.KeyEnv = "FMGATE_TEST_PAYLOAD_KEY"
	t.Setenv("FMGATE_TEST_PAYLOAD_KEY", "")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	err := cfg.CheckSecrets()
	if err == nil || !strings.Contains(err.Error(), "payloadLog.keyEnv") || !strings.Contains(err.Error(), "export FMGATE_TEST_PAYLOAD_KEY=") {
		t.Fatalf("CheckSecrets without the key: %v", err)
	}
	t.Setenv("FMGATE_TEST_PAYLOAD_KEY", strings.Repeat("ab", 32))
	if err := cfg.CheckSecrets(); err != nil {
		t.Fatalf("CheckSecrets with the key: %v", err)
	}
	cfg.PayloadLog.Enabled = false
	cfg.Auth.Keys = map[string]Caller{"sk-shop": {UserID: "shop", PayloadLog: true}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "payloadLog: payloadLog.enabled is false") {
		t.Fatalf("a key marked payloadLog with payload logs off: %v", err)
	}
}

// A key's guardrails profile must be one of guardrails.profiles.
func TestKeyGuardrailsProfile(t *testing.T) {
	cfg := Default()
	cfg.Auth.Keys = map[string]Caller{"sk-shop": {UserID: "shop", Guardrails: "storefront"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `guardrails: no guardrails profile named "storefront" (guardrails.profiles lists none)`) {
		t.Fatalf("a key naming a profile that does not exist: %v", err)
	}
	cfg.Guardrails.Profiles = map[string]guardrail.Config{"storefront": {Email: guardrail.Redact}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a key naming its profile: %v", err)
	}
}

// An AWS profile is a Bedrock tier's or deployment's credentials; on any
// other provider it would be ignored, so it is refused by name.
func TestAWSProfileIsBedrocks(t *testing.T) {
	c := Default()
	c.Models[0].Deployments = []Deployment{{Name: "east"}, {Name: "partner", AWSProfile: "partner"}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "models[0].deployments[1].awsProfile: only bedrock tiers sign with an AWS profile, not sim ones") {
		t.Fatalf("an AWS profile on a simulated deployment: %v", err)
	}
	c.Models[0].Provider, c.Models[0].Region = "bedrock", "us-east-1"
	if err := c.Validate(); err != nil {
		t.Fatalf("an AWS profile on a bedrock deployment: %v", err)
	}
	if got := c.Models[0].Deployment(c.Models[0].Deployments[1]); got.AWSProfile != "partner" || got.Region != "us-east-1" {
		t.Fatalf("the deployment's tier: %+v", got)
	}
}

// server.memoryLimit reads as bytes, "auto" or "off".
func TestMemoryLimitBytes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int64
		auto bool
	}{
		{"", 0, true},
		{"auto", 0, true},
		{"AUTO", 0, true},
		{"off", 0, false},
		{"768MiB", 768 << 20, false},
		{"1.5GiB", 3 << 29, false},
		{"65536 KiB", 64 << 20, false},
		{"134217728", 128 << 20, false},
		{"134217728B", 128 << 20, false},
	} {
		n, auto, err := Server{MemoryLimit: tt.in}.MemoryLimitBytes()
		if err != nil || n != tt.n || auto != tt.auto {
			t.Errorf("%q: %d, auto %v, %v; want %d, auto %v", tt.in, n, auto, err, tt.n, tt.auto)
		}
	}
	for _, bad := range []string{"-1GiB", "0", "NaN", "1e30GiB", "512 mb", "GiB"} {
		if _, _, err := (Server{MemoryLimit: bad}).MemoryLimitBytes(); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
