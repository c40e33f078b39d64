package openai

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/gateway"
)

func TestDecodeEmbeddings(t *testing.T) {
	many := `["` + strings.Repeat(`a","`, gateway.MaxEmbedInputs) + `a"]`
	tests := []struct {
		name      string
		give      string
		want      Embeddings
		wantParam string // the 400's param, when refused
		wantMsg   string // a part of its message
	}{
		{name: "one string", give: `{"model":"titan-embed","input":"hello"}`,
			want: Embeddings{Model: "titan-embed", Inputs: []string{"hello"}, Encoding: EncodingFloat}},
		{name: "an array, base64, dimensions, user", give: `{"model":"m","input":["a","b"],"encoding_format":"base64","dimensions":256,"user":"u1"}`,
			want: Embeddings{Model: "m", Inputs: []string{"a", "b"}, Dimensions: 256, Encoding: EncodingBase64, User: "u1"}},
		{name: "nulls are absent", give: `{"model":"m","input":"x","encoding_format":null,"dimensions":null,"user":null}`,
			want: Embeddings{Model: "m", Inputs: []string{"x"}, Encoding: EncodingFloat}},
		{name: "no model", give: `{"input":"x"}`, wantParam: "model", wantMsg: "provide a model"},
		{name: "no input", give: `{"model":"m"}`, wantParam: "input", wantMsg: "provide an input"},
		{name: "empty string", give: `{"model":"m","input":""}`, wantParam: "input", wantMsg: "must not be empty"},
		{name: "blank string", give: `{"model":"m","input":"  \n"}`, wantParam: "input", wantMsg: "must not be empty"},
		{name: "empty array", give: `{"model":"m","input":[]}`, wantParam: "input", wantMsg: "at least one string"},
		{name: "an empty string in the array", give: `{"model":"m","input":["a",""]}`, wantParam: "input", wantMsg: "input[1]"},
		{name: "token ids", give: `{"model":"m","input":[1212,318]}`, wantParam: "input", wantMsg: "token ids are not accepted"},
		{name: "arrays of token ids", give: `{"model":"m","input":[[1212,318],[42]]}`, wantParam: "input", wantMsg: "token ids are not accepted"},
		{name: "an object", give: `{"model":"m","input":{"text":"a"}}`, wantParam: "input", wantMsg: "a string or an array of strings"},
		{name: "a number among strings", give: `{"model":"m","input":["a",{"b":1}]}`, wantParam: "input", wantMsg: "input[1]"},
		{name: "too many inputs", give: `{"model":"m","input":` + many + `}`, wantParam: "input", wantMsg: "maximum length 2048"},
		{name: "zero dimensions", give: `{"model":"m","input":"a","dimensions":0}`, wantParam: "dimensions", wantMsg: ">= 1"},
		{name: "another encoding", give: `{"model":"m","input":"a","encoding_format":"int8"}`, wantParam: "encoding_format", wantMsg: "'float' or 'base64'"},
		{name: "long user", give: `{"model":"m","input":"a","user":"` + strings.Repeat("u", MaxUserBytes+1) + `"}`, wantParam: "user"},
		{name: "unknown field", give: `{"model":"m","input":"a","truncate":"END"}`, wantParam: "truncate", wantMsg: "Unrecognized request argument"},
		{name: "not json", give: `{"model":`, wantParam: "", wantMsg: "ends too early"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, e := DecodeEmbeddings([]byte(tt.give))
			if tt.wantParam != "" || tt.wantMsg != "" {
				if e == nil {
					t.Fatalf("accepted as %+v; want a 400 on %q", got, tt.wantParam)
				}
				if e.Status != http.StatusBadRequest || e.Param != tt.wantParam || !strings.Contains(e.Message, tt.wantMsg) {
					t.Fatalf("error %d %q %q; want 400 on %q saying %q", e.Status, e.Param, e.Message, tt.wantParam, tt.wantMsg)
				}
				return
			}
			if e != nil {
				t.Fatalf("refused: %v", e)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// decodedList is an embeddings answer as a client reads it.
type decodedList struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		Prompt int     `json:"prompt_tokens"`
		Total  int     `json:"total_tokens"`
		Cost   float64 `json:"cost_usd"`
	} `json:"usage"`
}

// TestAppendEmbeddingsRoundTrips: float arrays and base64 (little-endian
// float32, as OpenAI's SDKs decode it) carry the same vectors exactly.
func TestAppendEmbeddingsRoundTrips(t *testing.T) {
	res := &gateway.EmbedResult{Vectors: [][]float32{{0.1, -0.25, 1e-7, float32(math.Pi)}, {0, -1, 0.5, 3.4e38}},
		Tier: "titan-embed", ModelID: "amazon.titan-embed-text-v2:0", InputTokens: 12, CostUSD: 2.4e-7}
	for _, enc := range []string{EncodingFloat, EncodingBase64} {
		t.Run(enc, func(t *testing.T) {
			var got decodedList
			if err := json.Unmarshal(AppendEmbeddings(nil, res, enc), &got); err != nil {
				t.Fatal(err)
			}
			if got.Object != "list" || got.Model != res.ModelID || got.Usage.Prompt != 12 || got.Usage.Total != 12 || got.Usage.Cost != res.CostUSD {
				t.Fatalf("answer %+v", got)
			}
			for i, d := range got.Data {
				if d.Object != "embedding" || d.Index != i {
					t.Fatalf("item %d: %+v", i, d)
				}
				var v []float32
				if enc == EncodingFloat {
					if err := json.Unmarshal(d.Embedding, &v); err != nil {
						t.Fatal(err)
					}
				} else {
					var s string
					if err := json.Unmarshal(d.Embedding, &s); err != nil {
						t.Fatalf("item %d is not a base64 string: %s", i, d.Embedding)
					}
					raw, err := base64.StdEncoding.DecodeString(s)
					if err != nil || len(raw) != 4*len(res.Vectors[i]) {
						t.Fatalf("item %d: %d bytes, %v", i, len(raw), err)
					}
					for j := 0; j < len(raw); j += 4 {
						v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(raw[j:])))
					}
				}
				if !reflect.DeepEqual(v, res.Vectors[i]) {
					t.Fatalf("item %d decodes to %v, want %v", i, v, res.Vectors[i])
				}
			}
		})
	}
}
