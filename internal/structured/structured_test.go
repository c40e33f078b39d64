package structured

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	s, err := Compile([]byte(`{"type":"object","properties":{"title":{"type":"string"},"volumes":{"type":"integer","minimum":1}},"required":["title","volumes"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		text string
		ok   bool
	}{
		{`{"title":"ワンピース","volumes":110}`, true},
		{`{"title":"ワンピース"}`, false},
		{`{"title":"x","volumes":0}`, false},
		{`{"title":"x","volumes":2,"extra":1}`, false},
		{`Here is the JSON: {"title":"x","volumes":2}`, false},
		{`[1]`, false},
	} {
		if err := s.Check(tt.text); (err == nil) != tt.ok {
			t.Errorf("Check(%s) = %v, want ok %v", tt.text, err, tt.ok)
		}
	}
	var any *Schema
	if err := any.Check(`{"a":1}`); err != nil {
		t.Errorf("json_object mode refused an object: %v", err)
	}
	if err := any.Check(`"text"`); err == nil {
		t.Error("json_object mode took a string")
	}
}

func TestCompileRefusesOutsideReferences(t *testing.T) {
	for _, schema := range []string{
		`{"$ref":"file:///etc/passwd"}`,
		`{"$ref":"https://example.com/s.json"}`,
		`{"type":"object","properties":{"a":{"$ref":"/etc/hosts"}}}`,
	} {
		if _, err := Compile([]byte(schema)); err == nil {
			t.Errorf("Compile(%s) loaded a reference outside the schema", schema)
		}
	}
	if _, err := Compile([]byte(`{"$defs":{"n":{"type":"integer"}},"type":"object","properties":{"a":{"$ref":"#/$defs/n"}}}`)); err != nil {
		t.Errorf("an inner reference was refused: %v", err)
	}
	if _, err := Compile([]byte(`{"type":"nope"}`)); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Errorf("a bad type compiled: %v", err)
	}
}

// FuzzCompileAndCheck: a client's schema and a model's answer, both
// untrusted bytes, compile and check or fail with an error; nothing
// panics, and no schema reaches outside itself.
func FuzzCompileAndCheck(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"title":{"type":"string"},"volumes":{"type":"integer","minimum":1}},"required":["title"]}`), `{"title":"x","volumes":2}`)
	f.Add([]byte(`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`), `{}`)
	f.Add([]byte(`{"type":"array","items":{"enum":[1,"a",null]},"minItems":1}`), `[1,"a"]`)
	f.Add([]byte(`{"pattern":"(a+)+$","type":"string"}`), `"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"`)
	f.Add([]byte(`{"$ref":"file:///etc/passwd"}`), `1`)
	f.Add([]byte(`{"anyOf":[{"type":"object"},{"not":{}}],"format":"email"}`), `{"a":"\ud800"}`)
	f.Add([]byte(`[]`), `nope`)
	f.Fuzz(func(t *testing.T, schema []byte, answer string) {
		s, err := Compile(schema)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("a refusal without words")
			}
			return
		}
		_ = s.Check(answer)
	})
}
