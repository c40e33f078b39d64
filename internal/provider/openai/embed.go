package openai

import (
	"context"
	"errors"
	"fmt"
	"slices"

	sdk "github.com/openai/openai-go/v3"

	"github.com/fmgate/fmgate/internal/provider"
)

// EmbedderConfig configures one embedding tier served by an
// OpenAI-compatible server's POST /v1/embeddings.
type EmbedderConfig struct {
	// Config is the server, the model id, the key and the HTTP client, as
	// for a chat tier; Estimate is not used.
	Config
	// Dimensions is the model's own vector length: a request for it is
	// sent without "dimensions", which older models and many compatible
	// servers refuse.
	Dimensions int
	// CountTokens counts an input's tokens when the server reports no
	// usage; nil counts about four bytes a token.
	CountTokens func(string) int
}

// Embedder calls one embedding model on an OpenAI-compatible server,
// through the SDK's Embeddings.New. Failures are classified as the chat
// provider's are.
type Embedder struct {
	p    *Provider
	dims int
	// count estimates input tokens the server did not report.
	count func(string) int
}

var _ provider.Embedder = (*Embedder)(nil)

// NewEmbedder returns an embedder for cfg.
func NewEmbedder(cfg EmbedderConfig) (*Embedder, error) {
	p, err := New(cfg.Config)
	if err != nil {
		return nil, err
	}
	count := cfg.CountTokens
	if count == nil {
		count = func(s string) int { return (len(s) + 3) / 4 }
	}
	return &Embedder{p: p, dims: cfg.Dimensions, count: count}, nil
}

// Embed implements provider.Embedder. The vectors are asked for as floats,
// which every compatible server speaks.
func (e *Embedder) Embed(ctx context.Context, req *provider.EmbedRequest) (*provider.EmbedResponse, error) {
	resp := &provider.EmbedResponse{ModelID: e.p.cfg.ModelID}
	params := sdk.EmbeddingNewParams{
		Model:          e.p.cfg.ModelID,
		Input:          sdk.EmbeddingNewParamsInputUnion{OfArrayOfStrings: req.Inputs},
		EncodingFormat: sdk.EmbeddingNewParamsEncodingFormatFloat,
	}
	if req.Dimensions > 0 && req.Dimensions != e.dims {
		params.Dimensions = sdk.Int(int64(req.Dimensions))
	}
	out, err := e.p.client.Embeddings.New(ctx, params, traced(ctx)...)
	if err != nil {
		return resp, e.p.failure(ctx, err)
	}
	if out.Model != "" {
		resp.ModelID = out.Model
	}
	// Billed as the server counted, even when its answer is unusable.
	resp.InputTokens = int(out.Usage.PromptTokens)
	if resp.InputTokens == 0 {
		for _, in := range req.Inputs {
			resp.InputTokens += e.count(in)
		}
	}
	resp.Vectors = make([][]float32, len(req.Inputs))
	// The data may come in any order: each names its input's index.
	for _, d := range out.Data {
		i := int(d.Index)
		if i < 0 || i >= len(req.Inputs) || resp.Vectors[i] != nil {
			return resp, e.p.fail(provider.KindUnavailable, 0, "", fmt.Errorf("embedding index %d does not match one of the %d inputs", d.Index, len(req.Inputs)))
		}
		v := make([]float32, len(d.Embedding))
		for j, x := range d.Embedding {
			v[j] = float32(x)
		}
		resp.Vectors[i] = v
	}
	if slices.ContainsFunc(resp.Vectors, func(v []float32) bool { return v == nil }) {
		return resp, e.p.fail(provider.KindUnavailable, 0, "", errors.New("the answer lacks a vector for some inputs"))
	}
	return resp, nil
}
