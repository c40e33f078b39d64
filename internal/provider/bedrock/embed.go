package bedrock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"golang.org/x/sync/errgroup"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
)

// Limits of Bedrock's embedding models, and how they are called.
const (
	// TitanConcurrency is how many of one request's inputs are embedded at
	// once on Titan, which takes one text a call.
	TitanConcurrency = 8
	// CohereBatch is the most texts Cohere Embed takes in one call.
	CohereBatch = 96
)

// inputTokensHeader is where InvokeModel reports the input tokens billed.
const inputTokensHeader = "X-Amzn-Bedrock-Input-Token-Count"

// Embedder calls one Bedrock embedding model through InvokeModel: Titan
// Text Embeddings v2 (amazon.titan-embed-text-v2:0), one call per input,
// or Cohere Embed (cohere.embed-*), up to CohereBatch inputs a call. The
// client, its credentials and its failures are the chat provider's.
type Embedder struct {
	p      *Provider
	cohere bool
	// dims is the model's own vector length, sent to Cohere only when
	// another is asked for (its v3 models take none).
	dims  int
	count func(string) int
}

var _ provider.Embedder = (*Embedder)(nil)

// NewEmbedder builds the embedder of an embedding tier, m being its
// connection (config.Embedding.Connection) and dims its default vector
// length, and resolves its credentials as New does. count counts an input's
// tokens when Bedrock reports none; nil counts about four bytes a token.
func NewEmbedder(ctx context.Context, m config.Model, dims int, count func(string) int, opts Options) (*Embedder, error) {
	cohere := strings.HasPrefix(m.ModelID, "cohere.embed-")
	if !cohere && !strings.HasPrefix(m.ModelID, "amazon.titan-embed-text-v2") {
		return nil, fmt.Errorf("bedrock: %q is neither Titan Text Embeddings v2 nor Cohere Embed", m.ModelID)
	}
	p, err := New(ctx, m, opts)
	if err != nil {
		return nil, err
	}
	if count == nil {
		count = func(s string) int { return (len(s) + 3) / 4 }
	}
	return &Embedder{p: p, cohere: cohere, dims: dims, count: count}, nil
}

// Embed implements provider.Embedder.
func (e *Embedder) Embed(ctx context.Context, req *provider.EmbedRequest) (*provider.EmbedResponse, error) {
	resp := &provider.EmbedResponse{ModelID: e.p.modelID, Vectors: make([][]float32, len(req.Inputs))}
	var (
		tokens []int
		err    error
	)
	if e.cohere {
		tokens, err = e.cohereEmbed(ctx, req, resp.Vectors)
	} else {
		tokens, err = e.titanEmbed(ctx, req, resp.Vectors)
	}
	for _, n := range tokens {
		resp.InputTokens += n
	}
	return resp, err
}

// titanRequest and titanResponse are Titan Text Embeddings v2's bodies.
type titanRequest struct {
	InputText  string `json:"inputText"`
	Dimensions int    `json:"dimensions,omitempty"`
	Normalize  bool   `json:"normalize"`
}

type titanResponse struct {
	Embedding           []float32 `json:"embedding"`
	InputTextTokenCount int       `json:"inputTextTokenCount"`
}

// titanEmbed embeds each input in a call of its own, TitanConcurrency at
// once, into vectors; after the first failure no more calls start. The
// calls already under way are let finish rather than cancelled, so that
// what Bedrock bills for them is counted: it returns the tokens of each
// call that answered.
func (e *Embedder) titanEmbed(ctx context.Context, req *provider.EmbedRequest, vectors [][]float32) ([]int, error) {
	tokens := make([]int, len(req.Inputs))
	var g errgroup.Group
	g.SetLimit(TitanConcurrency)
	var failed atomic.Bool
	for i, text := range req.Inputs {
		if failed.Load() {
			break // another input failed: its error is the call's
		}
		g.Go(func() error {
			if failed.Load() {
				return nil
			}
			body, _ := json.Marshal(titanRequest{InputText: text, Dimensions: req.Dimensions, Normalize: true})
			raw, header, err := e.invoke(ctx, body)
			if err != nil {
				failed.Store(true)
				return err
			}
			var out titanResponse
			jerr := json.Unmarshal(raw, &out)
			tokens[i] = out.InputTextTokenCount
			if tokens[i] == 0 {
				tokens[i] = headerTokens(header, e.count(text))
			}
			if jerr != nil || out.Embedding == nil {
				failed.Store(true)
				return e.malformed(fmt.Errorf("titan embedding: %w", errors.Join(jerr, errors.New("no embedding in the answer"))))
			}
			vectors[i] = out.Embedding
			return nil
		})
	}
	return tokens, g.Wait() // the first failure
}

// cohereRequest is Cohere Embed's body; cohereResponse its answer, whose
// embeddings are a list of vectors, or by type ({"float": [...]}) on the
// models that answer so.
type cohereRequest struct {
	Texts           []string `json:"texts"`
	InputType       string   `json:"input_type"`
	OutputDimension int      `json:"output_dimension,omitempty"`
}

type cohereResponse struct {
	Embeddings json.RawMessage `json:"embeddings"`
}

// cohereEmbed embeds the inputs CohereBatch at a time, as documents
// (input_type search_document), into vectors. It returns the tokens of
// each call.
func (e *Embedder) cohereEmbed(ctx context.Context, req *provider.EmbedRequest, vectors [][]float32) ([]int, error) {
	var tokens []int
	for from := 0; from < len(req.Inputs); from += CohereBatch {
		texts := req.Inputs[from:min(from+CohereBatch, len(req.Inputs))]
		in := cohereRequest{Texts: texts, InputType: "search_document"}
		if req.Dimensions != e.dims {
			in.OutputDimension = req.Dimensions
		}
		body, _ := json.Marshal(in)
		raw, header, err := e.invoke(ctx, body)
		if err != nil {
			return tokens, err
		}
		var out cohereResponse
		var got [][]float32
		if err := json.Unmarshal(raw, &out); err == nil {
			if err := json.Unmarshal(out.Embeddings, &got); err != nil {
				var byType struct {
					Float [][]float32 `json:"float"`
				}
				_ = json.Unmarshal(out.Embeddings, &byType)
				got = byType.Float
			}
		}
		estimate := 0
		for _, t := range texts {
			estimate += e.count(t)
		}
		tokens = append(tokens, headerTokens(header, estimate)) // billed, even when the answer is unusable
		if len(got) != len(texts) {
			return tokens, e.malformed(fmt.Errorf("cohere embedding: %d vectors for %d texts", len(got), len(texts)))
		}
		copy(vectors[from:], got)
	}
	return tokens, nil
}

// malformed is the failure of an answer that is not the model's format:
// a broken upstream, which the next tier may stand in for.
func (e *Embedder) malformed(err error) error {
	return &provider.Error{Kind: provider.KindUnavailable, Model: e.p.name, Code: "MalformedEmbedding", Err: fmt.Errorf("bedrock: %w", err)}
}

// invoke makes one InvokeModel call with body, returning the answer's body
// and headers.
func (e *Embedder) invoke(ctx context.Context, body []byte) ([]byte, map[string][]string, error) {
	out, err := e.p.client.InvokeModel(ctx, &bedrockruntime.InvokeModelInput{
		ModelId: aws.String(e.p.modelID), Body: body,
		ContentType: aws.String("application/json"), Accept: aws.String("application/json"),
	}, traced(ctx))
	if err != nil {
		return nil, nil, e.p.normalise(ctx, err)
	}
	var header map[string][]string
	if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok && raw != nil {
		header = raw.Header
	}
	return out.Body, header, nil
}

// headerTokens is the input tokens InvokeModel reported in its headers,
// or estimate when it reported none.
func headerTokens(header map[string][]string, estimate int) int {
	for k, vs := range header {
		if strings.EqualFold(k, inputTokensHeader) && len(vs) > 0 {
			if n, err := strconv.Atoi(vs[0]); err == nil && n >= 0 {
				return n
			}
		}
	}
	return estimate
}
