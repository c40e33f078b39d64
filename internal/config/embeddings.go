package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/quota"
)

// Embedding is one embedding tier (embeddings[]): a model that turns texts
// into vectors for POST /v1/embeddings. A request names the tier it starts
// at; when that tier fails, the call falls to the next tier of the list
// that can give vectors of the same length, never to a chat tier. Vectors
// of two models are not comparable: the answer names the model that made
// them.
type Embedding struct {
	// Name is the gateway's name for the tier, e.g. "titan-embed"; it may
	// not be a chat tier's name.
	Name string `yaml:"name"`
	// Provider serving it: "sim" (the built-in simulator), "openai" (any
	// server with OpenAI's POST /v1/embeddings) or "bedrock" (InvokeModel:
	// Titan Text Embeddings v2, amazon.titan-embed-text-v2:0, one call per
	// input; or Cohere Embed, cohere.embed-*, up to 96 inputs a call).
	Provider string `yaml:"provider"`
	// ModelID is the provider's model identifier.
	ModelID string `yaml:"modelId"`
	// Aliases are other names requests may use for the tier.
	Aliases []string `yaml:"aliases"`
	// Region is the AWS region of a bedrock tier (required for bedrock).
	Region string `yaml:"region"`
	// Endpoint overrides the vendor's base URL, as a chat tier's: Bedrock's
	// BaseEndpoint, or an OpenAI-compatible server's API root such as
	// http://127.0.0.1:11434/v1 ("" = the vendor's own).
	Endpoint string `yaml:"endpoint"`
	// APIKeyEnv names the environment variable holding an openai tier's
	// key (optional: local servers need none). Bedrock uses the AWS SDK's
	// default credential chain.
	APIKeyEnv string `yaml:"apiKeyEnv"`
	// CAFile holds PEM certificates trusted for the tier's endpoint besides
	// the system's, as a chat tier's. Default "": the system's roots.
	CAFile string `yaml:"caFile"`
	// InputPerMTok is the price per million input tokens (embeddings have
	// no output).
	InputPerMTok float64 `yaml:"inputPerMTok"`
	// Dimensions is the length of the vectors of a request that asks for
	// none.
	Dimensions int `yaml:"dimensions"`
	// AllowedDimensions are the lengths a request may ask for with
	// "dimensions" (Titan v2: 256, 512, 1024); empty: Dimensions alone. A
	// length the tier cannot give is refused with 400 naming it.
	AllowedDimensions []int `yaml:"allowedDimensions"`
	// MaxInputTokens bounds each input, counted with the gateway's
	// tokenizer: a longer input is refused with 400 naming it, and a lower
	// tier with a smaller bound is skipped. Titan v2: 8,192; Cohere: 512.
	MaxInputTokens int `yaml:"maxInputTokens"`
	// Quota is the provider's ceilings for this model, kept in the quota
	// ledger under the tier's name (as quota.models keeps a chat tier's);
	// quota.safetyMargin and the priority classes apply.
	Quota quota.Ceiling `yaml:"quota"`
}

// embeddingProviders are the providers an embedding tier may use.
var embeddingProviders = []string{"sim", "openai", "bedrock"}

// Allows reports whether the tier can give vectors of dims dimensions.
func (e Embedding) Allows(dims int) bool {
	if len(e.AllowedDimensions) == 0 {
		return dims == e.Dimensions
	}
	return slices.Contains(e.AllowedDimensions, dims)
}

// Price is the tier's price: input only.
func (e Embedding) Price() budget.Price { return budget.Price{InputPerMTok: e.InputPerMTok} }

// Connection is the tier's provider, model id, endpoint, region, key and
// trust as a chat tier's config: what both kinds of tier share, for the
// provider packages, which build their clients from one.
func (e Embedding) Connection() Model {
	return Model{Name: e.Name, Provider: e.Provider, ModelID: e.ModelID, Region: e.Region, Endpoint: e.Endpoint,
		APIKeyEnv: e.APIKeyEnv, CAFile: e.CAFile}
}

// defaultEmbeddings are the MangaAssist profile's embedding tiers: Titan
// Text Embeddings v2 and, below it, Cohere's multilingual model, both
// simulated, at Bedrock's prices and on-demand quotas.
func defaultEmbeddings() []Embedding {
	return []Embedding{
		{Name: "titan-embed", Provider: "sim", ModelID: "amazon.titan-embed-text-v2:0", InputPerMTok: 0.02,
			Dimensions: 1024, AllowedDimensions: []int{256, 512, 1024}, MaxInputTokens: 8192,
			Quota: quota.Ceiling{TPM: 300_000, RPM: 6_000}},
		{Name: "cohere-embed", Provider: "sim", ModelID: "cohere.embed-multilingual-v3", InputPerMTok: 0.10,
			Dimensions: 1024, MaxInputTokens: 512, Quota: quota.Ceiling{TPM: 300_000, RPM: 2_000}},
	}
}

// validateEmbeddings checks the embedding tiers: each named once, in no
// chat tier's names, with a provider it can use, its vector lengths and
// its ceilings.
func (c Config) validateEmbeddings(v *validator) {
	chat := map[string]bool{}
	for _, m := range c.Models {
		chat[m.Name] = true
	}
	// names maps each tier name and alias to its tier, so that no name a
	// request may use means two tiers. Model ids may repeat: two tiers can
	// be one model in two regions.
	names := map[string]string{}
	for _, e := range c.Embeddings {
		if e.Name != "" && names[e.Name] == "" {
			names[e.Name] = e.Name
		}
	}
	seen := map[string]bool{}
	for i, e := range c.Embeddings {
		p := fmt.Sprintf("embeddings[%d]", i)
		switch {
		case e.Name == "":
			v.add(p+".name", "must not be empty")
		case chat[e.Name]:
			v.add(p+".name", fmt.Sprintf("%q is a chat tier's name: quotas and breakers are kept by name", e.Name))
		case seen[e.Name]:
			v.add(p+".name", fmt.Sprintf("duplicate embedding tier %q", e.Name))
		}
		seen[e.Name] = true
		if _, ok := c.Quota.Models[e.Name]; ok && e.Name != "" {
			v.add("quota.models."+e.Name, fmt.Sprintf("%s is an embedding tier: its ceilings are %s.quota", e.Name, p))
		}
		for j, a := range e.Aliases {
			ap := fmt.Sprintf("%s.aliases[%d]", p, j)
			switch {
			case strings.TrimSpace(a) == "" || len(a) > maxAliasBytes:
				v.add(ap, fmt.Sprintf("must be a name of 1 to %d bytes", maxAliasBytes))
			case names[a] != "" && names[a] != e.Name:
				v.add(ap, fmt.Sprintf("%q already names embedding tier %q", a, names[a]))
			}
			names[a] = e.Name
		}
		if !slices.Contains(embeddingProviders, e.Provider) {
			v.add(p+".provider", fmt.Sprintf("unknown provider %q (want one of %s)", e.Provider, strings.Join(embeddingProviders, ", ")))
		} else {
			e.Connection().validateProvider(v, p)
		}
		if e.Provider == "bedrock" && !strings.HasPrefix(e.ModelID, "amazon.titan-embed-text-v2") && !strings.HasPrefix(e.ModelID, "cohere.embed-") {
			v.add(p+".modelId", fmt.Sprintf("%q: bedrock embedding tiers speak Titan Text Embeddings v2 (amazon.titan-embed-text-v2:0) or Cohere Embed (cohere.embed-*)", e.ModelID))
		}
		switch {
		case e.CAFile != "" && e.Provider == "sim":
			v.add(p+".caFile", "the simulator is called in process: it has no endpoint to trust")
		case e.CAFile != "":
			if _, err := e.Connection().RootCAs(); err != nil {
				v.add(p+".caFile", err.Error())
			}
		}
		if e.InputPerMTok < 0 {
			v.add(p+".inputPerMTok", "must be >= 0")
		}
		if e.Dimensions <= 0 {
			v.add(p+".dimensions", "must be > 0")
		}
		for j, d := range e.AllowedDimensions {
			if d <= 0 {
				v.add(fmt.Sprintf("%s.allowedDimensions[%d]", p, j), "must be > 0")
			}
		}
		if len(e.AllowedDimensions) > 0 && e.Dimensions > 0 && !slices.Contains(e.AllowedDimensions, e.Dimensions) {
			v.add(p+".allowedDimensions", fmt.Sprintf("must include dimensions (%d)", e.Dimensions))
		}
		if e.MaxInputTokens <= 0 {
			v.add(p+".maxInputTokens", "must be > 0")
		}
		if e.Quota.TPM <= 0 {
			v.add(p+".quota.tpm", "must be > 0: the provider's tokens-per-minute ceiling for the model")
		}
		if e.Quota.RPM <= 0 {
			v.add(p+".quota.rpm", "must be > 0: the provider's requests-per-minute ceiling for the model")
		}
		if e.Quota.Concurrent < 0 {
			v.add(p+".quota.concurrent", "must be >= 0 (0: no cap)")
		}
	}
}

// Embedding returns the named embedding tier.
func (c Config) Embedding(name string) (Embedding, bool) {
	for _, e := range c.Embeddings {
		if e.Name == name {
			return e, true
		}
	}
	return Embedding{}, false
}

// ResolveEmbedding returns the embedding tier a request's model name
// means: a tier's name, model id or alias, or the model id inside a
// Bedrock ARN.
func (c Config) ResolveEmbedding(name string) (Embedding, bool) {
	if name == "" {
		return Embedding{}, false
	}
	forms, k := bedrockForms(name)
	for _, n := range forms[:k] {
		for _, e := range c.Embeddings {
			if e.Name == n || e.ModelID == n || slices.Contains(e.Aliases, n) {
				return e, true
			}
		}
	}
	return Embedding{}, false
}

// QuotaLedger is the quota ledger's config: the quota section, with the
// embedding tiers' ceilings under their names.
func (c Config) QuotaLedger() quota.Config {
	q := c.Quota
	q.Models = maps.Clone(q.Models)
	if q.Models == nil {
		q.Models = map[string]quota.Ceiling{}
	}
	for _, e := range c.Embeddings {
		q.Models[e.Name] = e.Quota
	}
	for _, m := range c.Models {
		for _, d := range m.Deployments {
			if d.TPM > 0 {
				q.Models[m.Name+"@"+d.Name] = quota.Ceiling{TPM: d.TPM, RPM: d.RPM}
			}
		}
	}
	return q
}
