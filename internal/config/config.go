// Package config holds fmgate's one typed configuration: the defaults that form
// the MangaAssist profile, loading a YAML file over them, and validation that
// lists every problem with its field path. A config that fails validation is
// never applied, not even in part.
package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/budget"
)

// Config is the whole gateway configuration. The zero value is not useful;
// start from Default.
type Config struct {
	// Profile names the deployment profile; informational.
	Profile string `yaml:"profile"`
	Server  Server `yaml:"server"`
	// Locales the assistant answers in; the first is the default.
	Locales []string `yaml:"locales"`
	Prompt  Prompt   `yaml:"prompt"`
	// Models are the model tiers in order: the first is the primary.
	Models []Model `yaml:"models"`
	// Embeddings are the embedding tiers of POST /v1/embeddings, in
	// fallback order.
	Embeddings []Embedding `yaml:"embeddings"`
	Deadline   Deadline    `yaml:"deadline"`
	Session    Session     `yaml:"session"`
	Auth       Auth        `yaml:"auth"`
	Fleet      Fleet       `yaml:"fleet"`
	Batch      Batch       `yaml:"batch"`
	// UnitCosts price what a turn consumes besides model tokens.
	UnitCosts UnitCosts `yaml:"unitCosts"`

	Policies `yaml:",inline"`
}

// UnitCosts are the prices of a turn's non-model resources, so that the
// cost_usd of its spans adds up to the whole cost of the turn, not only its
// tokens. The defaults follow the MangaAssist cost decomposition: state
// writes about $0.0009 per turn (two writes), compute about $0.0028 for a
// turn of about two seconds.
type UnitCosts struct {
	// StorageWriteUSD per session-state write (step 10). Default 0.00045.
	StorageWriteUSD float64 `yaml:"storageWriteUSD"`
	// CacheCallUSD per response-cache read or write. Default 0.00001.
	CacheCallUSD float64 `yaml:"cacheCallUSD"`
	// ComputePerSecondUSD amortises the gateway's compute over a turn's wall
	// time. Default 0.0014.
	ComputePerSecondUSD float64 `yaml:"computePerSecondUSD"`
}

// DefaultGCPercent is server.gcPercent's default, Go's.
const DefaultGCPercent = 100

// MemoryLimitBytes reads server.memoryLimit: the limit in bytes, or auto
// (the caller derives it from the cgroup), or 0 and !auto for "off".
func (s Server) MemoryLimitBytes() (n int64, auto bool, err error) {
	v := strings.TrimSpace(s.MemoryLimit)
	switch strings.ToLower(v) {
	case "", "auto":
		return 0, true, nil
	case "off":
		return 0, false, nil
	}
	num, unit := v, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(v, u.suffix) {
			num, unit = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.mult
			break
		}
	}
	x, perr := strconv.ParseFloat(num, 64)
	if perr != nil || math.IsNaN(x) || x <= 0 || x*float64(unit) > math.MaxInt64/2 {
		return 0, false, fmt.Errorf("%q is not a size: give bytes or a number with KiB, MiB or GiB (e.g. 768MiB), \"auto\" or \"off\"", s.MemoryLimit)
	}
	n = int64(x * float64(unit))
	if n < 64<<20 {
		return 0, false, fmt.Errorf("%q is below 64 MiB, where the collector would run all the time", s.MemoryLimit)
	}
	return n, false, nil
}

// Server is the HTTP listener and its limits.
type Server struct {
	// Addr to listen on. Default 127.0.0.1:8080.
	Addr string `yaml:"addr"`
	// AdminToken guards /admin/ and /dashboard. FMGATE_ADMIN_TOKEN overrides
	// it; with neither, a random token is generated at start and printed once.
	AdminToken string `yaml:"adminToken"`
	// MaxMessageBytes is the largest user message accepted, in bytes of UTF-8
	// text. Default 8192.
	MaxMessageBytes int `yaml:"maxMessageBytes"`
	// PublicMetrics serves GET /metrics without the admin token, for
	// scrapers on a trusted network. Default false: scrapers send the token
	// as a Bearer credential.
	PublicMetrics bool `yaml:"publicMetrics"`
	// DrainTimeout bounds how long in-flight streams may finish after SIGTERM.
	// Default 30s.
	DrainTimeout time.Duration `yaml:"drainTimeout"`
	// OriginPatterns are extra origins (host patterns such as
	// "shop.example.com" or "*.example.com") allowed to open the WebSocket
	// and to POST to the chat routes; the server's own origin always is.
	OriginPatterns []string `yaml:"originPatterns"`
	// ExternalURL is the address operators reach the gateway at, when it is
	// not the listener's own (e.g. https://gw.example.com behind a
	// TLS-terminating proxy). When it is https, the dashboard's session
	// cookie is marked Secure; its host is accepted as the Origin of
	// requests that change state under /admin/ and /dashboard, besides
	// the Host they arrive with. Default "": Secure only for requests that
	// reached fmgate over TLS.
	ExternalURL string `yaml:"externalURL"`
	// GCPercent is the garbage collector's target while serving, as GOGC
	// sets it: the heap may grow by this percentage of the live heap before
	// a collection. Higher spends memory to save CPU: 200 took 4-9% off the
	// CPU a request at 1,000 req/s, and its heap, up to three times the live
	// one, is what MemoryLimit bounds. A GOGC environment variable, when
	// set, wins. Read at start. Default 100 (Go's; 0 means the default); at
	// least 50.
	GCPercent int `yaml:"gcPercent"`
	// MemoryLimit is the soft limit of the Go heap, as GOMEMLIMIT sets it:
	// near it the collector runs more often whatever GCPercent says, so
	// that a burst of garbage (a flood of large bodies) ends in more
	// collections rather than the container's OOM kill. Set it below the
	// memory the host gives the gateway, with room for the live heap: a
	// limit under the live heap makes the collector run all the time (with
	// 10,000 WebSockets and 2,000 streams the live heap passed 500 MiB). A
	// size in bytes with an optional unit (KiB, MiB, GiB; "768MiB"), "off",
	// or "auto": three quarters of the memory limit of the process's cgroup
	// (a container's limit), none where it sets none. A GOMEMLIMIT
	// environment variable, when set, wins. Read at start. Default "auto".
	MemoryLimit string `yaml:"memoryLimit"`
	// BodyTimeout bounds the time a client takes to send a request body; a
	// slower one gets 408. It ends with the body, so streamed answers and
	// WebSockets are not cut. Default 10s.
	BodyTimeout time.Duration `yaml:"bodyTimeout"`
	// AllowedHosts are the names a request's Host header may give (its port
	// is ignored): host names, IP addresses, patterns such as
	// "*.example.com", or "*" for any. A request for another host gets 421,
	// so that a page whose DNS name has been pointed at the gateway's
	// address (DNS rebinding) cannot use it. /healthz and /readyz answer
	// whatever the host. Default empty: in the demo profile
	// (auth.trustUserHeader with no auth.keys) only loopback names, i.e.
	// localhost, *.localhost, 127.0.0.1 and ::1; otherwise any host.
	AllowedHosts []string `yaml:"allowedHosts"`
	// TrustedProxies are the addresses (IPs or CIDR prefixes) of the
	// proxies and load balancers in front of the gateway. A request from
	// one names its client in X-Forwarded-For: the client is the entry
	// nearest the gateway that is not itself a trusted proxy. From anyone
	// else X-Forwarded-For is ignored, so a client cannot pick the address
	// it is limited by (rateLimit.ip). Default empty: the peer's address.
	TrustedProxies []string `yaml:"trustedProxies"`
	// TLS serves HTTPS (and HTTP/2) on Addr instead of plain HTTP.
	TLS TLS `yaml:"tls"`
	// Images bound the images a vendor front door's request may carry.
	Images Images `yaml:"images"`
}

// Images bound the pictures the vendor front doors take: inline (base64
// data, data URLs), and from remote URLs on the hosts an operator allows.
// Each bound broken is a 400 naming the field and the limit. A request
// body's own limit still applies to the whole request, inline images
// included.
type Images struct {
	// MaxBytes bounds one image after decoding. Default 5 MiB (5242880),
	// Anthropic's and Bedrock's limit.
	MaxBytes int `yaml:"maxBytes"`
	// MaxPerRequest bounds the images of one request, its whole
	// conversation's, inline and remote alike: a request's fetched images
	// take at most MaxPerRequest×MaxBytes of memory. Default 20.
	MaxPerRequest int `yaml:"maxPerRequest"`
	// MaxSide bounds an image's width and height in pixels. Default 8000,
	// the vendors' limit.
	MaxSide int `yaml:"maxSide"`
	// AllowedHosts are the hosts whose remote image URLs (an OpenAI
	// image_url with an https URL, an Anthropic url source) fmgate
	// fetches, once the caller is authenticated and admitted: a host
	// name or IP address, matched exactly, or "*.example.com" for the
	// names below example.com. Only https is fetched (http only from a
	// loopback host), at most 3 redirects, each to an allowed host; a
	// private, loopback or link-local address is fetched only from a host
	// listed by its exact name. Default empty: remote image URLs are
	// refused, and fmgate fetches nothing on a client's behalf.
	AllowedHosts []string `yaml:"allowedHosts"`
	// FetchTimeout bounds the fetch of one request's remote images, all
	// of them, from the first connection to the last byte; a slower fetch
	// is a 400. The turn's deadlines start once its images are in.
	// Default 5s.
	FetchTimeout time.Duration `yaml:"fetchTimeout"`
}

// validate checks the remote image hosts and the fetch timeout.
func (im Images) validate(v *validator) {
	for i, h := range im.AllowedHosts {
		if msg := imageHostProblem(h); msg != "" {
			v.add(fmt.Sprintf("server.images.allowedHosts[%d]", i), msg)
		}
	}
	if im.FetchTimeout <= 0 {
		v.add("server.images.fetchTimeout", "must be > 0")
	}
}

// imageHostProblem says what is wrong with an image host pattern, or "".
func imageHostProblem(h string) string {
	switch {
	case h == "*":
		return `"*" would let any client make fmgate fetch from any host: list the hosts, or patterns such as *.example.com`
	case strings.Contains(h, "/"):
		return fmt.Sprintf("%q: name the host alone, without a scheme or path (e.g. images.example.com)", h)
	}
	if _, _, err := net.SplitHostPort(h); err == nil {
		return fmt.Sprintf("%q: name the host without a port", h)
	}
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return ""
	}
	name, wild := strings.CutPrefix(h, "*.")
	if !hostNameRE.MatchString(name) || wild && !strings.Contains(name, ".") {
		return fmt.Sprintf("%q is not a host name, IP address or pattern such as *.example.com", h)
	}
	return ""
}

// hostNameRE is a DNS name: dot-separated labels of letters, digits and
// hyphens.
var hostNameRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$`)

// TLS is the listener's certificate. The files are read again when they
// change, so a renewed certificate applies from the next connection.
type TLS struct {
	// CertFile and KeyFile are the PEM certificate chain and its private
	// key. Both or neither; default neither (plain HTTP, for a gateway
	// behind a TLS-terminating proxy or on loopback).
	CertFile string `yaml:"certFile"`
	KeyFile  string `yaml:"keyFile"`
	// ClientCAFile, when set, requires on /admin/ and /dashboard a client
	// certificate signed by one of its PEM certificates, besides the
	// admin token. Default "": the admin token alone.
	ClientCAFile string `yaml:"clientCAFile"`
}

// validate checks that the files are given together and load.
func (t TLS) validate(v *validator) {
	switch {
	case t.CertFile == "" && t.KeyFile == "":
		if t.ClientCAFile != "" {
			v.add("server.tls.clientCAFile", "needs server.tls.certFile and keyFile: client certificates come over TLS")
		}
		return
	case t.CertFile == "":
		v.add("server.tls.certFile", "must be set with server.tls.keyFile")
		return
	case t.KeyFile == "":
		v.add("server.tls.keyFile", "must be set with server.tls.certFile")
		return
	}
	if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
		v.add("server.tls", fmt.Sprintf("certificate %s with key %s: %v", t.CertFile, t.KeyFile, err))
	}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		switch {
		case err != nil:
			v.add("server.tls.clientCAFile", err.Error())
		case !x509.NewCertPool().AppendCertsFromPEM(pem):
			v.add("server.tls.clientCAFile", t.ClientCAFile+" holds no PEM certificate")
		}
	}
}

// Enabled reports whether the listener serves TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// Proxies are server.trustedProxies as prefixes (an address alone is a
// prefix of its full length); entries that do not parse are left out
// (Validate names them).
func (s Server) Proxies() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s.TrustedProxies {
		if pr, err := parsePrefix(p); err == nil {
			out = append(out, pr)
		}
	}
	return out
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// HostPatterns is the effective server.allowedHosts: the field when set,
// else the loopback names in the demo profile, else nil for any host.
func (c Config) HostPatterns() []string {
	switch {
	case len(c.Server.AllowedHosts) > 0:
		return c.Server.AllowedHosts
	case c.Auth.TrustUserHeader && len(c.Auth.Keys) == 0:
		return []string{"localhost", "*.localhost", "127.0.0.1", "::1"}
	}
	return nil
}

// Prompt is the system prompt the models receive.
type Prompt struct {
	// Name of the prompt artifact, used in its version label.
	Name string `yaml:"name"`
	// System is the prompt text, used when File is empty.
	System string `yaml:"system"`
	// File, when set, holds the prompt text instead of System.
	File string `yaml:"file"`
	// ReloadInterval is how often the running gateway re-reads the config
	// file and the prompt file, switching to a new prompt version without a
	// restart (SIGHUP, POST /admin/reload and POST /admin/versions/reload
	// switch at once). Zero disables the polling. Default 2s.
	ReloadInterval time.Duration `yaml:"reloadInterval"`
}

// Model is one model tier.
type Model struct {
	// Name is the gateway's name for the model, e.g. "sonnet".
	Name string `yaml:"name"`
	// Provider serving it: "sim" (the built-in simulator, the default
	// profile), "bedrock" (AWS Bedrock Runtime, Converse), "anthropic"
	// (Anthropic Messages) or "openai" (any OpenAI-compatible Chat
	// Completions server).
	Provider string `yaml:"provider"`
	// ModelID is the provider's model identifier.
	ModelID string `yaml:"modelId"`
	// Aliases are other names apps send for this tier, such as the
	// vendors' own model ids (claude-3-5-sonnet-latest,
	// anthropic.claude-3-5-sonnet-20240620-v1:0): a request naming one
	// starts at this tier on every front door. A Bedrock inference profile
	// (us.…, eu.…) or model ARN matches the id inside it. The MangaAssist
	// profile ships the common Claude Sonnet and Haiku ids.
	Aliases []string `yaml:"aliases"`
	// Region is the AWS region of a bedrock model (required for bedrock).
	Region string `yaml:"region"`
	// Endpoint overrides the vendor's base URL: Bedrock's BaseEndpoint,
	// Anthropic's or an OpenAI-compatible server's base URL ("" = the
	// vendor's own). Required for openai servers other than OpenAI itself.
	Endpoint string `yaml:"endpoint"`
	// APIKeyEnv names the environment variable holding the API key
	// (anthropic: required; openai: optional, local servers need none).
	// Keys never go in the config file. Bedrock uses the AWS SDK's default
	// credential chain instead.
	APIKeyEnv string `yaml:"apiKeyEnv"`
	// AWSProfile names the profile of the AWS shared config and credentials
	// files a bedrock tier signs with: another account's keys, or a role
	// it assumes (role_arn), so that a deployment may be served from
	// another account. Default "": the SDK's default chain (AWS_PROFILE,
	// the environment's keys, the instance's role).
	AWSProfile string `yaml:"awsProfile"`
	// CAFile holds PEM certificates trusted for the tier's endpoint
	// besides the system's: a private endpoint's own CA, or a
	// TLS-inspecting proxy's. The proxy itself comes from HTTPS_PROXY and
	// NO_PROXY, as for any Go program. Default "": the system's roots.
	CAFile string `yaml:"caFile"`
	// Price per million tokens.
	InputPerMTok  float64 `yaml:"inputPerMTok"`
	OutputPerMTok float64 `yaml:"outputPerMTok"`
	// CachedInputPerMTok prices input read from the vendor's prompt cache;
	// 0 means the vendor's published ratio to inputPerMTok: a tenth on
	// Anthropic, Bedrock and the simulator, a half on OpenAI.
	CachedInputPerMTok float64 `yaml:"cachedInputPerMTok"`
	// CacheWritePerMTok prices input written to the vendor's prompt cache;
	// 0 means 1.25 × inputPerMTok (Anthropic's and Bedrock's five-minute
	// cache), or inputPerMTok on the openai provider (OpenAI bills no
	// writes; set it for an OpenAI-compatible server that does).
	CacheWritePerMTok float64 `yaml:"cacheWritePerMTok"`
	// CacheWrite1hPerMTok prices input written to the vendor's prompt
	// cache for one hour (a cache mark with ttl 1h); 0 means 2 ×
	// inputPerMTok (Anthropic's and Bedrock's one-hour cache), or
	// inputPerMTok on the openai provider.
	CacheWrite1hPerMTok float64 `yaml:"cacheWrite1hPerMTok"`
	// ContextWindow in tokens. Default 200,000.
	ContextWindow int `yaml:"contextWindow"`
	// MaxOutputTokens per answer. Default 1,024.
	MaxOutputTokens int `yaml:"maxOutputTokens"`
	// Confidence reported when this tier answers: 1.0 primary, 0.7 secondary.
	Confidence float64 `yaml:"confidence"`
	// Upstream is how the tier is called. UpstreamStream ("stream")
	// streams every answer, so the first-token and idle deadlines guard
	// every call; UpstreamClient ("client") follows the client: an answer
	// the client takes whole (a JSON response) is asked for whole, in one
	// request and one response, bounded by the whole-answer deadline
	// (Deadline.Whole), and a streaming client's answer is streamed.
	// UpstreamAuto ("auto", the default when empty) is "client" for the
	// vendors' APIs (the OpenAI, Anthropic and Bedrock doors, whose clients
	// choose their own max_tokens and time-outs) and "stream" for the
	// assistant's own chat (WebSocket, /v1/chat, batch), whose 3-second
	// promise rests on the first-token deadline.
	Upstream string `yaml:"upstream"`
	// PromptCaching is the vendor's prompt cache: PromptCachingAuto
	// ("auto", the default when empty) marks the end of fmgate's own
	// system prompt and of the retrieved context as prefixes the vendor
	// may cache (Anthropic cache_control, Bedrock cachePoint; OpenAI caches
	// long prefixes by itself), so a conversation pays full input price for
	// them once per five minutes; PromptCachingOff ("off") marks nothing.
	// A client's own marks pass through either way.
	PromptCaching string `yaml:"promptCaching"`
	// Capabilities are what the tier can do beyond plain text:
	// CapabilityTools (call the tools a request offers), CapabilityPrefill
	// (continue an answer the client started), CapabilityTopK (sample
	// with top_k), CapabilitySeed (repeat an answer for a seed),
	// CapabilityVision (read the images a request carries),
	// CapabilityThinking (reason before answering: Anthropic's extended
	// thinking), CapabilityJSON (answer in JSON matching a client's schema:
	// response_format on openai, a tool the model must call on anthropic
	// and bedrock) and CapabilityGuardrails (apply the client's Amazon
	// Bedrock guardrail, the Bedrock door's guardrailConfig). A request
	// that needs one skips the tiers without it rather than reach a model
	// that would ignore it. Default: every capability fmgate can pass to
	// the tier's provider — tools, vision and json on every provider, prefill
	// and top_k on all but openai, seed on openai and the simulator,
	// thinking on the simulator and on anthropic and bedrock tiers whose
	// modelId is a Claude model that thinks (Claude 3.7 Sonnet, the Claude
	// 4 family and later), guardrails on bedrock tiers; list
	// "text" alone for a model that can only write text (e.g. an
	// OpenAI-compatible server without function calling or images).
	Capabilities []string `yaml:"capabilities"`
	// Deployments are the places the tier's model is served from when
	// there are several: regions, accounts or endpoints. Each inherits the
	// tier's fields and overrides what it names, and has its own breaker;
	// a throttled or failing one sheds its calls to its siblings before
	// the tier falls back to the next tier. Empty: the tier itself is its
	// one deployment.
	Deployments []Deployment `yaml:"deployments"`
	// Balance spreads calls over the deployments: "weighted" (each its
	// weight's share, the default), "least-busy" (fewest calls in flight
	// for its weight, fleet-wide) or "lowest-latency" (the fastest on
	// average).
	Balance string `yaml:"balance"`
}

// Deployment is one place a tier's model is served from. Its empty fields
// are the tier's.
type Deployment struct {
	// Name within the tier, e.g. "us-west-2" (letters, digits, - _ .).
	Name      string `yaml:"name"`
	Provider  string `yaml:"provider"`
	ModelID   string `yaml:"modelId"`
	Region    string `yaml:"region"`
	Endpoint  string `yaml:"endpoint"`
	APIKeyEnv string `yaml:"apiKeyEnv"`
	CAFile    string `yaml:"caFile"`
	// AWSProfile is a bedrock deployment's own credentials: an AWS profile
	// of another account or role (models[].awsProfile).
	AWSProfile string `yaml:"awsProfile"`
	// Weight is the deployment's share of calls against its siblings'.
	// Default 1.
	Weight int `yaml:"weight"`
	// TPM and RPM are the deployment's own ceilings (a region's or an
	// account's quota), kept in the quota ledger as "<tier>@<name>",
	// fleet-shared: a deployment without room is passed over for its
	// siblings. Zero: only the tier's quota applies.
	TPM int `yaml:"tpm"`
	RPM int `yaml:"rpm"`
}

// Deployment is the tier as served by its deployment d: the tier's fields
// with d's overrides, named "<tier>@<deployment>".
func (m Model) Deployment(d Deployment) Model {
	out := m
	out.Name = m.Name + "@" + d.Name
	out.Deployments, out.Balance = nil, ""
	for dst, v := range map[*string]string{&out.Provider: d.Provider, &out.ModelID: d.ModelID, &out.Region: d.Region,
		&out.Endpoint: d.Endpoint, &out.APIKeyEnv: d.APIKeyEnv, &out.CAFile: d.CAFile, &out.AWSProfile: d.AWSProfile} {
		if v != "" {
			*dst = v
		}
	}
	return out
}

// Capabilities a model tier may have (Model.Capabilities).
const (
	CapabilityText    = "text"
	CapabilityTools   = "tools"
	CapabilityPrefill = "prefill"
	CapabilityTopK    = "top_k"
	CapabilitySeed    = "seed"
	CapabilityVision  = "vision"
	// CapabilityThinking is Anthropic's extended thinking.
	CapabilityThinking = "thinking"
	// CapabilityGuardrails is applying a client's Amazon Bedrock
	// guardrail (the Bedrock door's guardrailConfig) to the model call.
	CapabilityGuardrails = "guardrails"
	// CapabilityJSON is answering in JSON that matches a client's schema
	// (or any JSON object), natively or through a forced tool call.
	CapabilityJSON = "json"
)

// capabilities are every capability a tier may list.
var capabilities = []string{CapabilityText, CapabilityTools, CapabilityPrefill, CapabilityTopK, CapabilitySeed, CapabilityVision, CapabilityThinking,
	CapabilityGuardrails, CapabilityJSON}

// Can reports whether the tier has capability c.
func (m Model) Can(c string) bool {
	if c == CapabilityText {
		return true
	}
	if len(m.Capabilities) == 0 {
		switch c {
		case CapabilityTools, CapabilityVision, CapabilityJSON:
			return true
		case CapabilityPrefill, CapabilityTopK:
			return m.Provider != "openai" // OpenAI's API has neither
		case CapabilitySeed:
			return m.Provider == "openai" || m.Provider == "" || m.Provider == "sim" // nor Anthropic's and Bedrock's this
		case CapabilityThinking:
			return m.Provider == "" || m.Provider == "sim" || (m.Provider == "anthropic" || m.Provider == "bedrock") && ThinkingModel(m.ModelID)
		case CapabilityGuardrails:
			return m.Provider == "bedrock" // only Bedrock applies its guardrails
		}
		return false
	}
	return slices.Contains(m.Capabilities, c)
}

// ThinkingModel reports whether id, an Anthropic or Bedrock model id
// (claude-sonnet-4-5, anthropic.claude-3-7-sonnet-20250219-v1:0, an
// inference profile of one), names a Claude model with extended thinking:
// Claude 3.7 Sonnet, and the Opus, Sonnet and Haiku models from 4 on.
// Older Claude models refuse a request that asks for it.
func ThinkingModel(id string) bool {
	if strings.Contains(id, "claude-3-7-sonnet") {
		return true
	}
	for _, family := range []string{"claude-opus-", "claude-sonnet-", "claude-haiku-"} {
		if i := strings.Index(id, family); i >= 0 {
			rest := id[i+len(family):]
			return rest != "" && rest[0] >= '4' && rest[0] <= '9'
		}
	}
	return false
}

// PromptCaching values (Model.PromptCaching).
const (
	PromptCachingAuto = "auto"
	PromptCachingOff  = "off"
)

// The ways a model tier is called (Model.Upstream).
const (
	UpstreamStream = "stream"
	UpstreamClient = "client"
	UpstreamAuto   = "auto"
)

// Deadline is the timeout hierarchy of a turn: every inner deadline is
// strictly inside its parent's.
type Deadline struct {
	// FirstByte is the budget to the first useful byte of a sync chat turn.
	// Default 3s.
	FirstByte time.Duration `yaml:"firstByte"`
	// Attempt bounds one provider call until its first token. Default 2s.
	Attempt time.Duration `yaml:"attempt"`
	// MinAttempt is the least time worth starting a model tier with; with
	// less left, the turn skips to the next fallback tier. Default 300ms.
	MinAttempt time.Duration `yaml:"minAttempt"`
	// Batch is the first-byte budget for batch turns. Default 60s.
	Batch time.Duration `yaml:"batch"`
	// Idle bounds the silence between two tokens of a model's answer, on
	// every provider and entry point: a stalled stream is cancelled and,
	// before the first byte reached the client, falls back like a timeout;
	// after it, it ends with an error frame. A client that takes its
	// answer whole (a JSON /v1/chat, a door without stream) sees nothing
	// until the end: for it, once firstByte is spent, a silence of
	// deadline.attempt is a stall, and the next tier gets one attempt.
	// Must be shorter than stream.maxDuration, which caps the whole
	// answer. Default 10s.
	Idle time.Duration `yaml:"idle"`
	// Whole bounds a model call asked for its whole answer at once (a tier
	// with upstream "client" or "auto", for a client that takes its answer
	// whole). With no tokens to watch, a stalled model is found only at
	// the call's bound: deadline.attempt for its first token plus the
	// output it was granted at WholePaceFloor tokens a second, at most
	// this. The turn then falls back like after any timeout.
	// stream.maxDuration, which caps every answer, caps it too. Default 30s.
	Whole time.Duration `yaml:"whole"`
}

// Session bounds the conversation history kept per session.
type Session struct {
	// HistoryExchanges kept per session. Default 10.
	HistoryExchanges int `yaml:"historyExchanges"`
	// TTL of an idle session, and how long a stored response of the
	// OpenAI Responses API is kept. Default 30m.
	TTL time.Duration `yaml:"ttl"`
	// MaxSessions held in memory, and as many stored responses. Default
	// 100,000.
	MaxSessions int `yaml:"maxSessions"`
	// RedisTimeout bounds each call to the fleet's session store in Redis
	// (fleet.redis set); a slower call answers the turn without history.
	// It bounds each call to the stored responses too. Default 250ms.
	RedisTimeout time.Duration `yaml:"redisTimeout"`
}

// Auth maps API keys to callers.
type Auth struct {
	// Keys maps a bearer key to its caller.
	Keys map[string]Caller `yaml:"keys"`
	// TrustUserHeader accepts X-User-Id (and the WebSocket userId field) as
	// the caller's identity, as behind an authenticating edge. Default true in
	// the demo profile.
	TrustUserHeader bool `yaml:"trustUserHeader"`
}

// Caller is an identity an API key maps to.
type Caller struct {
	UserID string `yaml:"userId"`
	// Tier is "standard" or "premium".
	Tier string `yaml:"tier"`
	// Priority is P0..P3; default P0 for chat.
	Priority string `yaml:"priority"`
	// SecretKeyEnv names the environment variable holding the secret access
	// key of this key when it is used as an AWS access key id on the Bedrock
	// front door (SigV4 signatures are verified with it). The secret never
	// goes in the config file. Empty: the key cannot sign Bedrock requests.
	SecretKeyEnv string `yaml:"secretKeyEnv"`
	// Tenant is the customer the key belongs to, for fair queueing inside a
	// priority class (queue.tenantWeights); default the user id.
	Tenant string `yaml:"tenant"`
	// MonthlyRequests is the key's usage-plan quota: at most this many
	// turns in any 30 days (a bucket that refills over the month, shared
	// by the fleet); 0: no quota.
	MonthlyRequests int `yaml:"monthlyRequests"`
	// RequestsPerMinute is the key's own rate limit, across every user it
	// serves, fleet-wide; 0: none.
	RequestsPerMinute int `yaml:"requestsPerMinute"`
	// Concurrent caps the key's turns in flight at once, fleet-wide; one
	// more is refused with 429 until one ends. 0: no cap.
	Concurrent int `yaml:"concurrent"`
	// DailyCostUSD bounds the key's spend per day (in budget.timezone),
	// on every door, fleet-wide: each turn's estimated cost is held
	// against it before the model is called and settled to the real cost.
	// 0: no budget.
	DailyCostUSD float64 `yaml:"dailyCostUsd"`
	// MonthlyCostUSD bounds the key's spend per calendar month, as
	// DailyCostUSD does per day. 0: no budget.
	MonthlyCostUSD float64 `yaml:"monthlyCostUsd"`
	// KeyID is the stable id of a key managed at run time: its budgets and
	// quota are counted under it, so a rotation does not reset them.
	KeyID string `yaml:"-"`
	// Signs marks a key managed at run time that is an access key id
	// signing Bedrock requests, as secretKeyEnv does for a configured one.
	Signs bool `yaml:"-"`
	// Models are the model tiers and embedding tiers the key may use, by
	// tier name; a request naming another is refused with 403, and the
	// cascade skips the others. A key that lists no embedding tier may not
	// call /v1/embeddings. Empty: every tier.
	Models []string `yaml:"models"`
	// PayloadLog logs the request and answer of every turn made with the
	// key (payloadLog, which must be enabled). Default false.
	PayloadLog bool `yaml:"payloadLog"`
	// Guardrails names the guardrails profile (guardrails.profiles) the
	// key's turns are checked under, instead of their feature's, route's
	// or the top level's. Default "": none of its own.
	Guardrails string `yaml:"guardrails"`
}

// Fleet configures shared state for several gateway instances.
type Fleet struct {
	// Redis address; empty means the embedded in-memory state.
	Redis string `yaml:"redis"`
	// RedisPassword, if the server needs one. FMGATE_REDIS_PASSWORD overrides.
	RedisPassword string `yaml:"redisPassword"`
	// KeyPrefix for every Redis key. Default "fmgate:".
	KeyPrefix string `yaml:"keyPrefix"`
	// Size is the number of instances; local fallbacks take 1/Size of a limit.
	Size int `yaml:"size"`
}

// Batch bounds the jobs of POST /v1/batch, so that batch work cannot take
// the memory live chat needs.
type Batch struct {
	// MaxMessages in one job. Default 1,000.
	MaxMessages int `yaml:"maxMessages"`
	// MaxBytes of one job's request body. Default 1 MiB.
	MaxBytes int `yaml:"maxBytes"`
	// MaxJobsPerUser queued or running at once for one caller; more are
	// refused with 429. Default 2.
	MaxJobsPerUser int `yaml:"maxJobsPerUser"`
	// MaxJobs held in memory for all callers: queued, running, or finished
	// and within ResultTTL. When full, the oldest finished job is dropped
	// early; with none finished, a new job is refused with 429. Default 64.
	MaxJobs int `yaml:"maxJobs"`
	// ResultTTL is how long a finished job's results stay readable at
	// GET /v1/batch/{id}. Default 1h.
	ResultTTL time.Duration `yaml:"resultTtl"`
}

// mangaAssistSystem is MangaAssist's system prompt: who the assistant is,
// how it answers and the store's policies. Every turn of every conversation
// starts with it, and it is long enough (over 1,024 tokens) for Anthropic
// and Bedrock to cache, so that from the second turn on it is read at a
// tenth of the input price (see promptCaching).
//
//go:embed mangaassist-system.txt
var mangaAssistSystem string

// The Claude ids apps already send, on Anthropic's API and on Bedrock,
// mapped to the MangaAssist tier of the same family (models[].aliases).
var (
	sonnetAliases = []string{
		"claude-3-sonnet-20240229",
		"claude-3-5-sonnet-20240620", "claude-3-5-sonnet-20241022", "claude-3-5-sonnet-latest",
		"claude-3-7-sonnet-20250219", "claude-3-7-sonnet-latest",
		"claude-sonnet-4-20250514", "claude-sonnet-4-0", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5",
		"anthropic.claude-3-5-sonnet-20240620-v1:0", "anthropic.claude-3-5-sonnet-20241022-v2:0",
		"anthropic.claude-3-7-sonnet-20250219-v1:0", "anthropic.claude-sonnet-4-20250514-v1:0",
		"anthropic.claude-sonnet-4-5-20250929-v1:0",
	}
	haikuAliases = []string{
		"claude-3-haiku-20240307",
		"claude-3-5-haiku-20241022", "claude-3-5-haiku-latest",
		"claude-haiku-4-5-20251001", "claude-haiku-4-5",
		"anthropic.claude-3-5-haiku-20241022-v1:0", "anthropic.claude-haiku-4-5-20251001-v1:0",
	}
)

// Default returns the MangaAssist profile.
func Default() Config {
	return Config{
		Profile: "MangaAssist",
		Server: Server{
			Addr:            "127.0.0.1:8080",
			MaxMessageBytes: 8 << 10,
			DrainTimeout:    30 * time.Second,
			BodyTimeout:     10 * time.Second,
			GCPercent:       DefaultGCPercent,
			MemoryLimit:     "auto",
			Images:          Images{MaxBytes: 5 << 20, MaxPerRequest: 20, MaxSide: 8000, FetchTimeout: 5 * time.Second},
		},
		Locales:   []string{"ja", "en"},
		UnitCosts: UnitCosts{StorageWriteUSD: 0.00045, CacheCallUSD: 0.00001, ComputePerSecondUSD: 0.0014},
		Prompt: Prompt{
			ReloadInterval: 2 * time.Second,
			Name:           "mangaassist-system",
			System:         mangaAssistSystem,
		},
		Models: []Model{
			{Name: "sonnet", Provider: "sim", ModelID: "anthropic.claude-3-sonnet-20240229-v1:0", Aliases: sonnetAliases,
				InputPerMTok: 3, OutputPerMTok: 15, ContextWindow: 200_000, MaxOutputTokens: 1024, Confidence: 1.0},
			{Name: "haiku", Provider: "sim", ModelID: "anthropic.claude-3-haiku-20240307-v1:0", Aliases: haikuAliases,
				InputPerMTok: 0.25, OutputPerMTok: 1.25, ContextWindow: 200_000, MaxOutputTokens: 1024, Confidence: 0.7},
		},
		Embeddings: defaultEmbeddings(),
		Deadline: Deadline{
			FirstByte:  3 * time.Second,
			Attempt:    2 * time.Second,
			MinAttempt: 300 * time.Millisecond,
			Batch:      60 * time.Second,
			Idle:       10 * time.Second,
			Whole:      30 * time.Second,
		},
		Session: Session{HistoryExchanges: 10, TTL: 30 * time.Minute, MaxSessions: 100_000, RedisTimeout: 250 * time.Millisecond},
		Auth:    Auth{TrustUserHeader: true},
		Fleet:   Fleet{KeyPrefix: "fmgate:", Size: 1},
		Batch:   Batch{MaxMessages: 1000, MaxBytes: 1 << 20, MaxJobsPerUser: 2, MaxJobs: 64, ResultTTL: time.Hour},

		Policies: defaultPolicies(),
	}
}

// Load reads a YAML file over the defaults. Unknown fields are errors. The
// result is validated; on any problem Load returns them all and no config.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads YAML from r over the defaults and validates the result.
func Parse(r io.Reader) (Config, error) {
	cfg := Default()
	data, err := io.ReadAll(r)
	if err != nil {
		return Config{}, fmt.Errorf("config: read: %w", err)
	}
	var problems []string
	if len(bytes.TrimSpace(data)) > 0 {
		fields, err := fieldProblems(data)
		if err != nil {
			return Config{}, err
		}
		problems = fields.problems
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			for _, msg := range yamlProblems(err) {
				if !strings.Contains(msg, " not found in type ") { // fieldProblems named it
					problems = append(problems, decodeProblem(msg, fields.lines))
				}
			}
		}
		if len(problems) > 0 {
			return Config{}, &Problems{List: problems}
		}
		problems = fields.unknownSimModels(cfg)
		// A breaker's entry replaces the default one whole: the fields
		// it leaves out take the default's values.
		breaker.FillDefaults(cfg.Breakers)
	}
	if err := cfg.Validate(); err != nil {
		var p *Problems
		if errors.As(err, &p) {
			problems = append(problems, p.List...)
		} else {
			return Config{}, err
		}
	}
	if len(problems) > 0 {
		return Config{}, &Problems{List: problems}
	}
	return cfg, nil
}

// Problems lists every reason a config was refused.
type Problems struct {
	List []string
}

func (p *Problems) Error() string {
	return "config has " + plural(len(p.List), "problem") + ":\n  " + strings.Join(p.List, "\n  ")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func yamlProblems(err error) []string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return te.Errors
	}
	return []string{err.Error()}
}

// Validate checks the whole config and returns a *Problems listing every
// problem with its field path, or nil.
func (c Config) Validate() error {
	var v validator
	if c.Server.Addr == "" {
		v.add("server.addr", "must not be empty")
	}
	if c.Server.MaxMessageBytes <= 0 {
		v.add("server.maxMessageBytes", "must be > 0")
	}
	if c.Server.DrainTimeout <= 0 {
		v.add("server.drainTimeout", "must be > 0")
	}
	if u := c.Server.ExternalURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			v.add("server.externalURL", "must be an absolute http:// or https:// URL, e.g. https://gw.example.com")
		}
	}
	if g := c.Server.GCPercent; g != 0 && g < 50 {
		v.add("server.gcPercent", "must be at least 50, or 0 for the default (100)")
	}
	if _, _, err := c.Server.MemoryLimitBytes(); err != nil {
		v.add("server.memoryLimit", err.Error())
	}
	if c.Server.BodyTimeout <= 0 {
		v.add("server.bodyTimeout", "must be > 0")
	}
	for i, h := range c.Server.AllowedHosts {
		field := fmt.Sprintf("server.allowedHosts[%d]", i)
		if _, _, err := net.SplitHostPort(h); err == nil {
			v.add(field, fmt.Sprintf("%q: name the host without a port", h))
		} else if _, err := path.Match(h, ""); h == "" || err != nil {
			v.add(field, fmt.Sprintf("%q is not a host name or pattern (e.g. gw.example.com, *.example.com)", h))
		}
	}
	for i, p := range c.Server.TrustedProxies {
		if _, err := parsePrefix(p); err != nil {
			v.add(fmt.Sprintf("server.trustedProxies[%d]", i), fmt.Sprintf("%q is not an IP address or CIDR prefix (e.g. 10.0.0.0/8)", p))
		}
	}
	c.Server.TLS.validate(&v)
	for _, b := range []struct {
		field string
		v     int
	}{{"maxBytes", c.Server.Images.MaxBytes}, {"maxPerRequest", c.Server.Images.MaxPerRequest}, {"maxSide", c.Server.Images.MaxSide}} {
		if b.v <= 0 {
			v.add("server.images."+b.field, "must be > 0")
		}
	}
	c.Server.Images.validate(&v)
	if len(c.Locales) == 0 {
		v.add("locales", "must list at least one locale")
	}
	for i, l := range c.Locales {
		if l != "ja" && l != "en" {
			v.add(fmt.Sprintf("locales[%d]", i), fmt.Sprintf("unsupported locale %q (want ja or en)", l))
		}
	}
	if u := c.UnitCosts; u.StorageWriteUSD < 0 || u.CacheCallUSD < 0 || u.ComputePerSecondUSD < 0 {
		v.add("unitCosts", "costs must be >= 0")
	}
	if c.Prompt.System == "" && c.Prompt.File == "" {
		v.add("prompt", "set system or file")
	}
	if c.Prompt.ReloadInterval < 0 {
		v.add("prompt.reloadInterval", "must be >= 0")
	}
	if c.Prompt.File != "" {
		if _, err := os.Stat(c.Prompt.File); err != nil {
			v.add("prompt.file", err.Error())
		}
	}
	if len(c.Models) == 0 {
		v.add("models", "must list at least one model")
	}
	seen := map[string]bool{}
	// names maps every name a request may use for a tier (its name, its
	// model id, its aliases) to the tier, so that no name means two tiers.
	names := map[string]string{}
	for _, m := range c.Models {
		if m.Name != "" {
			names[m.Name] = m.Name
		}
	}
	for _, m := range c.Models {
		if m.ModelID != "" && names[m.ModelID] == "" {
			names[m.ModelID] = m.Name
		}
	}
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		switch {
		case m.Name == "":
			v.add(p+".name", "must not be empty")
		case seen[m.Name]:
			v.add(p+".name", fmt.Sprintf("duplicate model %q", m.Name))
		}
		seen[m.Name] = true
		for j, a := range m.Aliases {
			ap := fmt.Sprintf("%s.aliases[%d]", p, j)
			switch {
			case strings.TrimSpace(a) == "" || len(a) > maxAliasBytes:
				v.add(ap, fmt.Sprintf("must be a name of 1 to %d bytes", maxAliasBytes))
			case names[a] != "" && names[a] != m.Name:
				v.add(ap, fmt.Sprintf("%q already names model %q", a, names[a]))
			}
			names[a] = m.Name
		}
		m.validateProvider(&v, p)
		m.validateDeployments(&v, p)
		switch {
		case m.CAFile != "" && m.Provider == "sim":
			v.add(p+".caFile", "the simulator is called in process: it has no endpoint to trust")
		case m.CAFile != "":
			if _, err := m.RootCAs(); err != nil {
				v.add(p+".caFile", err.Error())
			}
		}
		if m.InputPerMTok < 0 || m.OutputPerMTok < 0 || m.CachedInputPerMTok < 0 || m.CacheWritePerMTok < 0 || m.CacheWrite1hPerMTok < 0 {
			v.add(p, "prices must be >= 0")
		}
		for _, c := range m.Capabilities {
			if !slices.Contains(capabilities, c) {
				v.add(p+".capabilities", fmt.Sprintf("%q is not a capability (use one of %s)", c, strings.Join(capabilities, ", ")))
			}
		}
		if pc := m.PromptCaching; pc != "" && pc != PromptCachingAuto && pc != PromptCachingOff {
			v.add(p+".promptCaching", fmt.Sprintf("must be %q or %q (got %q)", PromptCachingAuto, PromptCachingOff, pc))
		}
		if m.ContextWindow <= 0 {
			v.add(p+".contextWindow", "must be > 0")
		}
		if m.MaxOutputTokens <= 0 {
			v.add(p+".maxOutputTokens", "must be > 0")
		} else if m.ContextWindow > 0 && m.MaxOutputTokens >= m.ContextWindow {
			v.add(p+".maxOutputTokens", "must be smaller than contextWindow")
		}
		if m.Confidence <= 0 || m.Confidence > 1 {
			v.add(p+".confidence", "must be in (0, 1]")
		}
		if m.Upstream != "" && m.Upstream != UpstreamStream && m.Upstream != UpstreamClient && m.Upstream != UpstreamAuto {
			v.add(p+".upstream", fmt.Sprintf("unknown value %q (want %s, %s or %s)", m.Upstream, UpstreamAuto, UpstreamStream, UpstreamClient))
		}
	}
	c.validateEmbeddings(&v)
	if h := c.Catalog.Hybrid; h != nil && *h && len(c.Embeddings) == 0 {
		v.add("catalog.hybrid", "true needs an embedding tier (embeddings) to embed the catalog and the questions with")
	}
	d := c.Deadline
	if d.FirstByte <= 0 {
		v.add("deadline.firstByte", "must be > 0")
	}
	if d.Attempt <= 0 || d.Attempt >= d.FirstByte {
		v.add("deadline.attempt", "must be > 0 and shorter than deadline.firstByte (provider call < retry loop < turn)")
	}
	if d.MinAttempt <= 0 || d.MinAttempt >= d.Attempt {
		v.add("deadline.minAttempt", "must be > 0 and shorter than deadline.attempt")
	}
	if d.Batch <= 0 {
		v.add("deadline.batch", "must be > 0")
	}
	if d.Idle <= 0 || (c.Stream.MaxDuration > 0 && d.Idle >= c.Stream.MaxDuration) {
		v.add("deadline.idle", "must be > 0 and shorter than stream.maxDuration (a silence between tokens < the whole answer)")
	}
	if d.Whole <= 0 {
		v.add("deadline.whole", "must be > 0")
	}
	if c.Session.HistoryExchanges < 0 {
		v.add("session.historyExchanges", "must be >= 0")
	}
	if c.Session.TTL <= 0 {
		v.add("session.ttl", "must be > 0")
	}
	if c.Session.MaxSessions <= 0 {
		v.add("session.maxSessions", "must be > 0")
	}
	if c.Session.RedisTimeout <= 0 {
		v.add("session.redisTimeout", "must be > 0")
	}
	for k, caller := range c.Auth.Keys {
		p := "auth.keys." + redactKey(k)
		if caller.UserID == "" {
			v.add(p+".userId", "must not be empty")
		}
		if caller.Tier != "" && caller.Tier != "standard" && caller.Tier != "premium" {
			v.add(p+".tier", fmt.Sprintf("unknown tier %q (want standard or premium)", caller.Tier))
		}
		if caller.Priority != "" {
			if _, ok := ParsePriority(caller.Priority); !ok {
				v.add(p+".priority", fmt.Sprintf("unknown priority %q (want P0..P3)", caller.Priority))
			}
		}
		if caller.SecretKeyEnv != "" && !envName(caller.SecretKeyEnv) {
			v.add(p+".secretKeyEnv", fmt.Sprintf("%q is not an environment variable name (letters, digits and _)", caller.SecretKeyEnv))
		}
		if caller.MonthlyRequests < 0 {
			v.add(p+".monthlyRequests", "must be >= 0 (0: no quota)")
		}
		if caller.Concurrent < 0 {
			v.add(p+".concurrent", "must be >= 0 (0: no cap)")
		}
		if caller.RequestsPerMinute < 0 {
			v.add(p+".requestsPerMinute", "must be >= 0 (0: no limit)")
		}
		if caller.DailyCostUSD < 0 {
			v.add(p+".dailyCostUsd", "must be >= 0 (0: no budget)")
		}
		if caller.MonthlyCostUSD < 0 {
			v.add(p+".monthlyCostUsd", "must be >= 0 (0: no budget)")
		}
		for _, m := range caller.Models {
			_, chat := c.Model(m)
			_, embed := c.Embedding(m)
			if !chat && !embed {
				names := c.ModelNames()
				for _, e := range c.Embeddings {
					names = append(names, e.Name)
				}
				v.add(p+".models", fmt.Sprintf("unknown model tier %q (want one of %s)", m, strings.Join(names, ", ")))
			}
		}
		if caller.PayloadLog && !c.PayloadLog.Enabled {
			v.add(p+".payloadLog", "payloadLog.enabled is false: switch payload logs on to log this key's turns")
		}
		if caller.Guardrails != "" {
			if err := c.Guardrails.CheckProfile(caller.Guardrails); err != nil {
				v.add(p+".guardrails", err.Error())
			}
		}
	}
	b := c.Batch
	for _, f := range []struct {
		name string
		v    int
	}{{"maxMessages", b.MaxMessages}, {"maxJobsPerUser", b.MaxJobsPerUser}, {"maxJobs", b.MaxJobs}} {
		if f.v <= 0 {
			v.add("batch."+f.name, "must be > 0")
		}
	}
	if b.MaxBytes < c.Server.MaxMessageBytes {
		v.add("batch.maxBytes", "must be at least server.maxMessageBytes")
	}
	if b.MaxJobsPerUser > b.MaxJobs {
		v.add("batch.maxJobsPerUser", "must not exceed batch.maxJobs")
	}
	if b.ResultTTL <= 0 {
		v.add("batch.resultTtl", "must be > 0")
	}
	if c.Fleet.Size < 1 {
		v.add("fleet.size", "must be >= 1")
	}
	c.validatePolicies(&v)
	return v.err()
}

// Price is the model's price for each class of tokens, the cache classes
// defaulted from inputPerMTok (see CachedInputPerMTok, CacheWritePerMTok,
// CacheWrite1hPerMTok).
func (m Model) Price() budget.Price {
	p := budget.Price{InputPerMTok: m.InputPerMTok, OutputPerMTok: m.OutputPerMTok,
		CachedInputPerMTok: m.CachedInputPerMTok, CacheWritePerMTok: m.CacheWritePerMTok,
		CacheWrite1hPerMTok: m.CacheWrite1hPerMTok}
	if p.CachedInputPerMTok == 0 {
		p.CachedInputPerMTok = m.InputPerMTok / 10
		if m.Provider == "openai" {
			p.CachedInputPerMTok = m.InputPerMTok / 2
		}
	}
	write, write1h := 1.25, 2.0
	if m.Provider == "openai" {
		write, write1h = 1, 1 // OpenAI bills no cache writes
	}
	if p.CacheWritePerMTok == 0 {
		p.CacheWritePerMTok = m.InputPerMTok * write
	}
	if p.CacheWrite1hPerMTok == 0 {
		p.CacheWrite1hPerMTok = m.InputPerMTok * write1h
	}
	return p
}

// RootCAs is the certificates the tier's endpoint is verified with: the
// system's and those in CAFile; nil (the system's) without a CAFile.
func (m Model) RootCAs() (*x509.CertPool, error) {
	if m.CAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(m.CAFile)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", m.CAFile)
	}
	return pool, nil
}

// CacheReadsInQuota reports whether the model's vendor counts the input
// read from its prompt cache against its tokens-per-minute limit: OpenAI
// does; Anthropic, Bedrock and the simulator do not.
func (m Model) CacheReadsInQuota() bool { return m.Provider == "openai" }

// maxAliasBytes bounds a model alias (Bedrock ARNs run to about 150 bytes).
const maxAliasBytes = 256

// Providers fmgate can call.

var providers = []string{"sim", "bedrock", "anthropic", "openai"}

// validateProvider checks what the model's provider needs that a config file
// can show: a region for Bedrock, an API key's environment variable that is
// set. Credentials the vendor's SDK resolves itself (the AWS chain) are
// checked when the provider is built.
func (m Model) validateProvider(v *validator, p string) {
	switch m.Provider {
	case "sim":
	case "bedrock":
		if m.Region == "" {
			v.add(p+".region", "bedrock needs an AWS region, e.g. region: us-east-1")
		}
	case "anthropic":
		if m.APIKeyEnv == "" {
			v.add(p+".apiKeyEnv", "anthropic needs the name of the environment variable holding the API key, e.g. apiKeyEnv: ANTHROPIC_API_KEY")
		}
	case "openai":
	default:
		v.add(p+".provider", fmt.Sprintf("unknown provider %q (want one of %s)", m.Provider, strings.Join(providers, ", ")))
		return
	}
	if m.ModelID == "" && m.Provider != "sim" {
		v.add(p+".modelId", "must name the provider's model id")
	}
	if m.AWSProfile != "" && m.Provider != "bedrock" {
		v.add(p+".awsProfile", fmt.Sprintf("only bedrock tiers sign with an AWS profile, not %s ones", m.Provider))
	}
	if m.Endpoint != "" && !strings.HasPrefix(m.Endpoint, "http://") && !strings.HasPrefix(m.Endpoint, "https://") {
		v.add(p+".endpoint", fmt.Sprintf("%q must be an http:// or https:// URL", m.Endpoint))
	}
}

// CheckSecrets reports every secret the config names that the environment
// does not hold, each with the variable to set. Validate checks the file
// alone; fmgate validate and start-up also call CheckSecrets, so a missing
// key fails before the first turn, not at it.
func (c Config) CheckSecrets() error {
	var v validator
	for i, m := range c.Models {
		if m.APIKeyEnv != "" && os.Getenv(m.APIKeyEnv) == "" {
			v.add(fmt.Sprintf("models[%d].apiKeyEnv", i), fmt.Sprintf("environment variable %s is not set; export %s=<your %s API key>", m.APIKeyEnv, m.APIKeyEnv, m.Provider))
		}
	}
	for i, e := range c.Embeddings {
		if e.APIKeyEnv != "" && os.Getenv(e.APIKeyEnv) == "" {
			v.add(fmt.Sprintf("embeddings[%d].apiKeyEnv", i), fmt.Sprintf("environment variable %s is not set; export %s=<your %s API key>", e.APIKeyEnv, e.APIKeyEnv, e.Provider))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Auth.Keys)) {
		if env := c.Auth.Keys[k].SecretKeyEnv; env != "" && os.Getenv(env) == "" {
			v.add("auth.keys."+redactKey(k)+".secretKeyEnv", fmt.Sprintf("environment variable %s is not set; export %s=<the secret access key Bedrock clients sign with>", env, env))
		}
	}
	if pl := c.PayloadLog; pl.Enabled && os.Getenv(pl.KeyEnv) == "" {
		v.add("payloadLog.keyEnv", fmt.Sprintf("payload logs are on but environment variable %s is not set; export %s=<32 random bytes in hex, e.g. from openssl rand -hex 32> (the key that seals payloads at rest)", pl.KeyEnv, pl.KeyEnv))
	}
	return v.err()
}

// envName reports whether s is a portable environment variable name.
func envName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

// ParsePriority reads "P0".."P3".
func ParsePriority(s string) (int, bool) {
	if len(s) == 2 && (s[0] == 'P' || s[0] == 'p') && s[1] >= '0' && s[1] <= '3' {
		return int(s[1] - '0'), true
	}
	return 0, false
}

// ResolveModel returns the tier a request's model name means: a tier's
// name, model id or alias. A Bedrock model ARN or inference profile
// (us.anthropic.…, eu.…, apac.…, global.…) means the tier whose id or alias
// is the model id inside it.
func (c Config) ResolveModel(name string) (Model, bool) {
	if name == "" {
		return Model{}, false
	}
	forms, k := bedrockForms(name)
	for _, n := range forms[:k] {
		for _, m := range c.Models {
			if m.Name == n || m.ModelID == n || slices.Contains(m.Aliases, n) {
				return m, true
			}
		}
	}
	return Model{}, false
}

// inferenceGeos are the prefixes of Bedrock's cross-region inference
// profiles.
var inferenceGeos = []string{"us.", "us-gov.", "eu.", "apac.", "global.", "ca.", "jp.", "au."}

// bedrockForms is name, then the model id inside it when it is a Bedrock
// ARN (…:foundation-model/ID, …:inference-profile/ID) or an inference
// profile id (us.ID): forms[:n].
func bedrockForms(name string) (forms [3]string, n int) {
	forms[0], n = name, 1
	if strings.HasPrefix(name, "arn:") {
		if i := strings.LastIndexByte(name, '/'); i >= 0 && i+1 < len(name) {
			name = name[i+1:]
			forms[n], n = name, n+1
		}
	}
	for _, g := range inferenceGeos {
		if rest, ok := strings.CutPrefix(name, g); ok && strings.Contains(rest, ".") {
			forms[n], n = rest, n+1
			break
		}
	}
	return forms, n
}

// ModelNames are the model tiers' names, in cascade order.
func (c Config) ModelNames() []string {
	names := make([]string, len(c.Models))
	for i, m := range c.Models {
		names[i] = m.Name
	}
	return names
}

// Model returns the named model tier.
func (c Config) Model(name string) (Model, bool) {
	for _, m := range c.Models {
		if m.Name == name {
			return m, true
		}
	}
	return Model{}, false
}

// SystemPrompt returns the prompt text, reading Prompt.File when set.
func (c Config) SystemPrompt() (string, error) {
	if c.Prompt.File == "" {
		return c.Prompt.System, nil
	}
	b, err := os.ReadFile(c.Prompt.File)
	if err != nil {
		return "", fmt.Errorf("config: prompt.file: %w", err)
	}
	return string(b), nil
}

func redactKey(k string) string {
	if len(k) <= 4 {
		return "****"
	}
	return k[:4] + "…"
}

type validator struct{ list []string }

func (v *validator) add(path, problem string) { v.list = append(v.list, path+": "+problem) }

// sub records every problem in err (a package's Validate result, an
// errors.Join of "field: problem" errors) under the section path.
func (v *validator) sub(section string, err error) {
	if err == nil {
		return
	}
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			v.sub(section, e)
		}
		return
	}
	v.list = append(v.list, section+"."+err.Error())
}

func (v *validator) err() error {
	if len(v.list) == 0 {
		return nil
	}
	return &Problems{List: v.list}
}

// deploymentName is a deployment's name: it goes into breaker, state and
// simulator names.
var deploymentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// validateDeployments checks m's deployments as tiers of their own.
func (m Model) validateDeployments(v *validator, p string) {
	switch m.Balance {
	case "", "weighted", "least-busy", "lowest-latency":
	default:
		v.add(p+".balance", fmt.Sprintf("unknown balance %q (want weighted, least-busy or lowest-latency)", m.Balance))
	}
	if m.Balance != "" && len(m.Deployments) == 0 {
		v.add(p+".balance", "needs deployments to balance")
	}
	seen := map[string]bool{}
	for i, d := range m.Deployments {
		dp := fmt.Sprintf("%s.deployments[%d]", p, i)
		switch {
		case !deploymentName.MatchString(d.Name):
			v.add(dp+".name", fmt.Sprintf("%q: want 1 to 64 letters, digits, '.', '_' or '-'", d.Name))
		case seen[d.Name]:
			v.add(dp+".name", fmt.Sprintf("duplicate deployment %q", d.Name))
		}
		seen[d.Name] = true
		if d.Weight < 0 {
			v.add(dp+".weight", "must be >= 0 (0: 1)")
		}
		if d.TPM < 0 || d.RPM < 0 || (d.TPM > 0) != (d.RPM > 0) {
			v.add(dp, "tpm and rpm: both > 0 for a ceiling of its own, or both 0")
		}
		dm := m.Deployment(d)
		if dm.Provider != m.Provider && (dm.Provider == "sim") != (m.Provider == "sim") {
			v.add(dp+".provider", "a tier's deployments are all simulated or all real")
		}
		dm.validateProvider(v, dp)
		if dm.CAFile != "" && dm.Provider != "sim" {
			if _, err := dm.RootCAs(); err != nil {
				v.add(dp+".caFile", err.Error())
			}
		}
	}
}
