package anthropic

import (
	"encoding/json"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/structured"
)

// decodeOutputFormat reads structured outputs: output_config.format, or
// the beta's output_format, {"type": "json_schema", "schema": {…}}. The
// answer's text is then JSON matching the schema, checked by the gateway
// on every tier. output_config's effort is refused by name: the tier
// decides how hard its model thinks.
func decodeOutputFormat(fields map[string]json.RawMessage) (provider.Format, *Error) {
	cfg, hasCfg := fields["output_config"]
	beta, hasBeta := fields["output_format"]
	hasCfg, hasBeta = hasCfg && !isNull(cfg), hasBeta && !isNull(beta)
	switch {
	case hasCfg && hasBeta:
		return provider.Format{}, invalid("output_format: give the format in output_config.format or in output_format, not both")
	case hasBeta:
		return decodeJSONSchemaFormat(beta, "output_format")
	case !hasCfg:
		return provider.Format{}, nil
	}
	var oc map[string]json.RawMessage
	if err := json.Unmarshal(cfg, &oc); err != nil || oc == nil {
		return provider.Format{}, invalid("output_config: must be an object like {\"format\": {\"type\": \"json_schema\", \"schema\": {…}}}")
	}
	if v, ok := oc["effort"]; ok && !isNull(v) {
		return provider.Format{}, invalid("output_config.effort: not supported by this server (the model tier decides its effort); remove it")
	}
	if err := onlyKeys(oc, "output_config", "format", "effort"); err != nil {
		return provider.Format{}, err
	}
	if v, ok := oc["format"]; ok && !isNull(v) {
		return decodeJSONSchemaFormat(v, "output_config.format")
	}
	return provider.Format{}, nil
}

// decodeJSONSchemaFormat reads {"type": "json_schema", "schema": {…}} at
// path; the schema must compile (draft 2020-12, references inside it
// only).
func decodeJSONSchemaFormat(v json.RawMessage, path string) (provider.Format, *Error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(v, &f); err != nil || f == nil {
		return provider.Format{}, invalid("%s: must be an object like {\"type\": \"json_schema\", \"schema\": {…}}", path)
	}
	if err := onlyKeys(f, path, "type", "schema"); err != nil {
		return provider.Format{}, err
	}
	var typ string
	if err := decodeString(f, "type", &typ); err != nil || typ != "json_schema" {
		return provider.Format{}, invalid("%s.type: must be \"json_schema\"", path)
	}
	schema := f["schema"]
	if !provider.IsJSONObject(schema) {
		return provider.Format{}, invalid("%s.schema: Field required (a JSON Schema object)", path)
	}
	if _, err := structured.Compile(schema); err != nil {
		return provider.Format{}, invalid("%s.schema: %v", path, err)
	}
	return provider.Format{Kind: provider.FormatJSONSchema, Schema: schema}, nil
}
