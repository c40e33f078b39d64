package bedrock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// titanDimensions are the vector lengths Titan Text Embeddings v2 gives.
var titanDimensions = []int{256, 512, 1024}

// simEmbed answers InvokeModel with an embedding model's body from the
// simulated model name, as Bedrock answers it: Titan Text Embeddings v2's
// {"inputText", "dimensions", "normalize"} gets {"embedding",
// "inputTextTokenCount"}; Cohere Embed's {"texts", "input_type",
// "output_dimension"} gets {"embeddings", "id", "texts", "response_type":
// "embeddings_floats"}. Both report the input tokens billed in
// X-Amzn-Bedrock-Input-Token-Count. The vectors are the simulator's
// (sim.EmbedText, keyed by the model's id), so the same text gets the same
// vector here as in process; a request that names no length gets
// sim.DefaultEmbedDimensions. The model's faults come out as Bedrock's
// exceptions.
func simEmbed(w http.ResponseWriter, r *http.Request, s *sim.Sim, name string, body []byte) {
	var in struct {
		InputText       *string  `json:"inputText"`
		Dimensions      int      `json:"dimensions"`
		Normalize       *bool    `json:"normalize"`
		Texts           []string `json:"texts"`
		InputType       string   `json:"input_type"`
		OutputDimension int      `json:"output_dimension"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		WriteException(w, Validation("The simulator's invoke takes an embedding model's body: Titan Text Embeddings v2's "+
			"{\"inputText\", \"dimensions\", \"normalize\"} or Cohere Embed's {\"texts\", \"input_type\"}: "+err.Error()))
		return
	}
	titan := in.InputText != nil
	req := &provider.EmbedRequest{Model: name, Dimensions: sim.DefaultEmbedDimensions}
	switch {
	case titan && in.Texts != nil:
		WriteException(w, Validation("inputText and texts are two models' fields: send one"))
		return
	case titan:
		if in.Dimensions != 0 {
			if !slices.Contains(titanDimensions, in.Dimensions) {
				WriteException(w, Validation(fmt.Sprintf("dimensions must be 256, 512 or 1024, not %d", in.Dimensions)))
				return
			}
			req.Dimensions = in.Dimensions
		}
		req.Inputs = []string{*in.InputText}
	case len(in.Texts) == 0 || len(in.Texts) > 96:
		WriteException(w, Validation("texts must hold 1 to 96 texts"))
		return
	case in.InputType == "":
		WriteException(w, Validation("input_type is required: search_document, search_query, classification or clustering"))
		return
	default:
		if in.OutputDimension != 0 {
			req.Dimensions = in.OutputDimension
		}
		req.Inputs = in.Texts
	}
	for i, text := range req.Inputs {
		if text == "" {
			WriteException(w, Validation(fmt.Sprintf("text %d is empty", i)))
			return
		}
	}
	resp, err := s.Embed(r.Context(), req)
	if err != nil {
		WriteException(w, simException(err))
		return
	}
	w.Header().Set("X-Amzn-Bedrock-Input-Token-Count", strconv.Itoa(resp.InputTokens))
	if titan {
		writeJSON(w, http.StatusOK, map[string]any{"embedding": resp.Vectors[0], "inputTextTokenCount": resp.InputTokens})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": newRequestID(), "texts": in.Texts, "embeddings": resp.Vectors,
		"response_type": "embeddings_floats"})
}
