// Package structured checks a model's JSON answer against what the client
// asked for: any JSON object (OpenAI's json_object mode), or one that
// matches a JSON Schema (json_schema, and strict tool arguments). A model
// whose answer fails the check has failed; the gateway asks the next tier.
package structured

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxSchemaBytes bounds a schema a client may send.
const MaxSchemaBytes = 64 << 10

// Schema is a compiled JSON Schema.
type Schema struct{ s *jsonschema.Schema }

// refuseLoads is the compiler's loader: a client's schema may not make
// fmgate read a file or fetch a URL ($ref to anything outside itself).
type refuseLoads struct{}

func (refuseLoads) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref to %q: only references inside the schema are allowed", url)
}

// Compile compiles a client's JSON Schema, with what is wrong in words a
// client can act on.
func Compile(schema []byte) (*Schema, error) {
	if len(schema) > MaxSchemaBytes {
		return nil, fmt.Errorf("the schema is larger than %d bytes", MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("the schema is not JSON: %w", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, errors.New("the schema must be a JSON object")
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoads{})
	c.DefaultDraft(jsonschema.Draft2020)
	const loc = "mem://client/schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("the schema: %w", err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("the schema does not compile: %s", firstLine(err))
	}
	return &Schema{s: s}, nil
}

// Check reports why text is not a JSON value that s accepts, or nil. A nil
// s accepts any JSON object.
func (s *Schema) Check(text string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("the answer is not JSON: %w", err)
	}
	if s == nil {
		if _, ok := v.(map[string]any); !ok {
			return errors.New("the answer is not a JSON object")
		}
		return nil
	}
	if err := s.s.Validate(v); err != nil {
		return fmt.Errorf("the answer does not match the schema: %s", firstLine(err))
	}
	return nil
}

// firstLine is an error's first line: the schema library explains each
// failure on lines of its own, the first naming where.
func firstLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}
