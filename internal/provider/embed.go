package provider

import "context"

// Embedder is the backend of an embedding tier: it turns texts into
// vectors. Its failures are *Error values classified as a chat provider's
// are (throttled, unavailable, timeout, validation …), so that retries,
// breakers and the fallback to the next tier react the same way.
type Embedder interface {
	Embed(ctx context.Context, req *EmbedRequest) (*EmbedResponse, error)
}

// EmbedRequest asks for one vector per input. Model is the gateway's tier
// name (e.g. "titan-embed"); the embedder maps it to its own model id.
type EmbedRequest struct {
	Model string
	// Inputs are the texts, none empty; the answer's vectors are in their
	// order.
	Inputs []string
	// Dimensions is the length of every vector wanted. An adapter whose
	// vendor takes the length as a parameter sends it only when it is not
	// the model's default, so that a model with one fixed length is never
	// sent a parameter it refuses.
	Dimensions int
}

// EmbedResponse is the vectors of an EmbedRequest, one per input in order.
type EmbedResponse struct {
	Vectors [][]float32
	// InputTokens is the input the vendor billed; an adapter whose vendor
	// reports none counts it with the gateway's tokenizer. With an error,
	// it is what the vendor billed before the call failed (the inputs of a
	// request made in several calls that were embedded, or an answer that
	// could not be used), so that the cost is counted as the vendor bills
	// it.
	InputTokens int
	// ModelID is the vendor's id of the model that answered.
	ModelID string
}
