package openai

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
)

// EmbedPipeline is what the embeddings door needs of the gateway.
type EmbedPipeline interface {
	Embed(ctx context.Context, t *gateway.Turn, in gateway.EmbedInput) (*gateway.EmbedResult, error)
	Authenticate(r *http.Request, key, bodyUser string, t *gateway.Turn) error
	ResolveEmbedding(name string) (config.Embedding, bool)
}

// Encodings of the vectors in an embeddings answer (encoding_format).
const (
	EncodingFloat  = "float"
	EncodingBase64 = "base64"
)

// Embeddings is a decoded POST /v1/embeddings request.
type Embeddings struct {
	// Model is the request's model, as sent.
	Model string
	// Inputs are the texts: input as one string, or its array.
	Inputs []string
	// Dimensions is the length asked for; 0 when not set.
	Dimensions int
	// Encoding is EncodingFloat (the default) or EncodingBase64.
	Encoding string
	User     string
}

// embeddingsRequest is the JSON body. Input stays raw: a string, an array
// of strings, or the token arrays fmgate refuses by name.
type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     *int            `json:"dimensions"`
	EncodingFormat *string         `json:"encoding_format"`
	User           *string         `json:"user"`
}

// ReadEmbeddings reads and decodes a request body of at most limit bytes
// (0: DefaultMaxBodyBytes). Every error is an *Error in OpenAI's shape.
func ReadEmbeddings(r *http.Request, limit int64) (Embeddings, *Error) {
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return Embeddings{}, invalidRequest("", "Could not read the request body: %v", err)
	}
	if int64(len(data)) > limit {
		e := invalidRequest("", "The request body is larger than %d bytes; send the inputs in several requests.", limit)
		e.Status = http.StatusRequestEntityTooLarge
		return Embeddings{}, e
	}
	return DecodeEmbeddings(data)
}

// DecodeEmbeddings decodes a request body. Every error is an *Error with
// status 400 in OpenAI's shape, naming the offending parameter: input must
// be a non-empty string or an array of 1 to gateway.MaxEmbedInputs
// non-empty strings (token ids are refused: fmgate's tiers tokenize
// differently), dimensions at least 1, encoding_format float or base64.
func DecodeEmbeddings(data []byte) (Embeddings, *Error) {
	var e Embeddings
	if !utf8.Valid(data) {
		return e, invalidRequest("", "The request body must be UTF-8 encoded JSON.")
	}
	var req embeddingsRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return e, jsonError(err)
	}
	if dec.More() {
		return e, invalidRequest("", "The request body must hold one JSON object, with nothing after it.")
	}
	if req.Model == "" {
		return e, invalidRequest("model", "you must provide a model parameter")
	}
	e.Model = req.Model
	var err *Error
	if e.Inputs, err = decodeInput(req.Input); err != nil {
		return e, err
	}
	if d := req.Dimensions; d != nil {
		if *d < 1 {
			return e, invalidRequest("dimensions", "Invalid 'dimensions': integer below minimum value. Expected a value >= 1, but got %d instead.", *d)
		}
		e.Dimensions = *d
	}
	e.Encoding = EncodingFloat
	if f := req.EncodingFormat; f != nil {
		if *f != EncodingFloat && *f != EncodingBase64 {
			return e, invalidRequest("encoding_format", "Invalid 'encoding_format': expected 'float' or 'base64', but got %q instead.", truncate(*f, 40))
		}
		e.Encoding = *f
	}
	if req.User != nil {
		if len(*req.User) > MaxUserBytes {
			return e, invalidRequest("user", "Invalid 'user': string too long. Expected a string with maximum length %d.", MaxUserBytes)
		}
		e.User = *req.User
	}
	return e, nil
}

// decodeInput reads input: one string, or an array of strings.
func decodeInput(raw json.RawMessage) ([]string, *Error) {
	if !isSet(raw) {
		return nil, invalidRequest("input", "you must provide an input parameter")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if strings.TrimSpace(one) == "" {
			return nil, invalidRequest("input", "Invalid 'input': the input must not be empty or only spaces.")
		}
		return []string{one}, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, invalidRequest("input", "Invalid 'input': expected a string or an array of strings.")
	}
	switch n := len(items); {
	case n == 0:
		return nil, invalidRequest("input", "Invalid 'input': the array must hold at least one string.")
	case n > gateway.MaxEmbedInputs:
		return nil, invalidRequest("input", "Invalid 'input': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", gateway.MaxEmbedInputs, n)
	}
	inputs := make([]string, len(items))
	for i, it := range items {
		if err := json.Unmarshal(it, &inputs[i]); err != nil {
			if isTokens(it) {
				return nil, invalidRequest("input", "Invalid 'input': token ids are not accepted: fmgate's embedding tiers each have their own tokenizer. Send the text.")
			}
			return nil, invalidRequest("input", "Invalid 'input[%d]': expected a string.", i)
		}
		if strings.TrimSpace(inputs[i]) == "" {
			return nil, invalidRequest("input", "Invalid 'input[%d]': the input must not be empty or only spaces.", i)
		}
	}
	return inputs, nil
}

// isTokens reports whether an input item is a token id or an array of them.
func isTokens(it json.RawMessage) bool {
	var id int64
	var ids []int64
	return json.Unmarshal(it, &id) == nil || json.Unmarshal(it, &ids) == nil
}

// NewEmbeddings is the OpenAI-compatible POST /v1/embeddings over g. "model"
// names an embedding tier (its name, modelId or an alias); any other is
// 404, as OpenAI answers an unknown model. The call starts at that tier
// and, when it fails, falls to the next embedding tier that gives vectors
// of the same length; the answer's "model" and the X-Fmgate-* headers say
// which answered. The caller's key is Authorization: Bearer, as for chat,
// and X-Fmgate-Feature attributes the call's cost (default "embeddings").
func NewEmbeddings(g EmbedPipeline, opts Options) http.Handler {
	d := &embedDoor{g: g, maxBody: opts.MaxBodyBytes}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/embeddings", d.embed)
	mux.Handle("/v1/embeddings", notAllowed("POST"))
	return mux
}

type embedDoor struct {
	g       EmbedPipeline
	maxBody int64
}

func (d *embedDoor) embed(w http.ResponseWriter, r *http.Request) {
	req, e := ReadEmbeddings(r, d.maxBody)
	if e != nil {
		e.Write(w)
		return
	}
	feature := r.Header.Get(HeaderFeature)
	if len(feature) > 64 {
		invalidRequest("", "The %s header must be at most 64 bytes.", HeaderFeature).Write(w)
		return
	}
	id := newID()
	h := w.Header()
	t := &gateway.Turn{
		RequestID:     id,
		Route:         "embeddings",
		Surface:       "openai",
		TraceParent:   r.Header.Get("traceparent"),
		OnTraceparent: func(tp string) { h.Set("traceparent", tp) },
		Feature:       feature,
		Stateless:     true,
	}
	key, _ := gateway.Bearer(r)
	if err := d.g.Authenticate(r, key, req.User, t); err != nil {
		embedError(err).Write(w)
		return
	}
	tier, ok := d.g.ResolveEmbedding(req.Model)
	if !ok {
		modelNotFound(req.Model).Write(w)
		return
	}
	t.StartTier = tier.Name
	h.Set("X-Request-Id", id)
	res, err := d.g.Embed(r.Context(), t, gateway.EmbedInput{Inputs: req.Inputs, Dimensions: req.Dimensions})
	if err != nil {
		embedError(err).Write(w)
		return
	}
	servedBy(h, res.Tier, res.Degraded, res.TraceID)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(append(AppendEmbeddings(nil, res, req.Encoding), '\n'))
}

// embedError is the OpenAI error for a call the gateway refused or failed,
// naming the parameter at fault when the gateway did.
func embedError(err error) *Error {
	e := fromGateway(err)
	if ge, ok := errors.AsType[*gateway.Error](err); ok && ge.Param != "" {
		e.Param = ge.Param
	}
	return e
}

// AppendEmbeddings appends res as OpenAI's embeddings list:
// {"object":"list","data":[{"object":"embedding","index":i,"embedding":…}],
// "model","usage":{"prompt_tokens","total_tokens"}}, each vector an array
// of numbers or, with EncodingBase64, the base64 of its little-endian
// float32 values, as OpenAI sends them. usage.cost_usd is fmgate's price
// of the call, when positive.
func AppendEmbeddings(dst []byte, res *gateway.EmbedResult, encoding string) []byte {
	dst = append(dst, `{"object":"list","data":[`...)
	var raw []byte
	for i, v := range res.Vectors {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"object":"embedding","index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"embedding":`...)
		if encoding == EncodingBase64 {
			raw = raw[:0]
			for _, x := range v {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(x))
			}
			dst = append(dst, '"')
			dst = base64.StdEncoding.AppendEncode(dst, raw)
			dst = append(dst, `"}`...)
			continue
		}
		dst = append(dst, '[')
		for j, x := range v {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendFloat(dst, float64(x), 'g', -1, 32)
		}
		dst = append(dst, "]}"...)
	}
	dst = append(dst, `],"model":`...)
	dst = appendString(dst, answeredBy(res.ModelID, res.Tier))
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(res.InputTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(res.InputTokens), 10)
	if res.CostUSD > 0 && !math.IsInf(res.CostUSD, 0) {
		dst = append(dst, `,"cost_usd":`...)
		dst = strconv.AppendFloat(dst, res.CostUSD, 'g', -1, 64)
	}
	return append(dst, "}}"...)
}
