package bedrock

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/structured"
)

// decodeRequestMetadata reads requestMetadata as Bedrock checks it: at
// most 16 pairs of strings, each key 1 to 256 characters and each value at
// most 256.
func decodeRequestMetadata(raw json.RawMessage) (map[string]string, error) {
	var md map[string]string
	if err := json.Unmarshal(raw, &md); err != nil {
		return nil, invalidf("requestMetadata must be an object of strings: %s", jsonProblem(err))
	}
	if len(md) > 16 {
		return nil, invalidf("requestMetadata holds %d pairs; the limit is 16", len(md))
	}
	for k, v := range md {
		if n := utf8.RuneCountInString(k); n < 1 || n > 256 {
			return nil, invalidf("requestMetadata keys must be 1 to 256 characters")
		}
		if utf8.RuneCountInString(v) > 256 {
			return nil, invalidf("requestMetadata.%s must be at most 256 characters", truncate(k, 40))
		}
	}
	return md, nil
}

// decodeOutputConfig reads outputConfig, Converse's structured output:
// textFormat {type: json_schema, structure: {jsonSchema: {schema, name,
// description}}}, the schema a JSON document in a string. The answer's
// text is then JSON matching it, checked by the gateway on every tier.
// effort is refused by name: the tier decides how hard its model thinks.
func decodeOutputConfig(raw json.RawMessage) (provider.Format, error) {
	var oc struct {
		Effort     json.RawMessage `json:"effort"`
		TextFormat *struct {
			Type      string `json:"type"`
			Structure *struct {
				JSONSchema *struct {
					Schema      *string `json:"schema"`
					Name        string  `json:"name"`
					Description string  `json:"description"`
				} `json:"jsonSchema"`
			} `json:"structure"`
		} `json:"textFormat"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&oc); err != nil {
		return provider.Format{}, invalidf("outputConfig is not valid: %s", jsonProblem(err))
	}
	if isSet(oc.Effort) {
		return provider.Format{}, invalidf("outputConfig.effort is not supported by this endpoint (the model tier decides its effort); remove it from the request")
	}
	tf := oc.TextFormat
	if tf == nil {
		return provider.Format{}, nil
	}
	if tf.Type != "json_schema" {
		return provider.Format{}, invalidf("outputConfig.textFormat.type must be json_schema")
	}
	if tf.Structure == nil || tf.Structure.JSONSchema == nil || tf.Structure.JSONSchema.Schema == nil {
		return provider.Format{}, invalidf("outputConfig.textFormat.structure.jsonSchema.schema is required: a JSON Schema, as a string")
	}
	js := tf.Structure.JSONSchema
	schema := json.RawMessage(*js.Schema)
	if !provider.IsJSONObject(schema) {
		return provider.Format{}, invalidf("outputConfig.textFormat.structure.jsonSchema.schema must be a JSON Schema object, as a string")
	}
	if _, err := structured.Compile(schema); err != nil {
		return provider.Format{}, invalidf("outputConfig.textFormat.structure.jsonSchema.schema: %v", err)
	}
	if js.Name != "" {
		if err := provider.CheckToolName(js.Name); err != nil {
			return provider.Format{}, invalidf("outputConfig.textFormat.structure.jsonSchema.name: %v", err)
		}
	}
	return provider.Format{Kind: provider.FormatJSONSchema, Name: js.Name, Description: js.Description, Schema: schema}, nil
}
