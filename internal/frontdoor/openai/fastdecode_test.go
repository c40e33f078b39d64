package openai

import (
	"reflect"
	"strings"
	"testing"
)

// TestDecodeFastKnowsEveryMember: every member of chatRequest, nested
// ones included, is one the one-pass decoder reads into the same field, so
// a member added to the struct and not to the decoder is noticed here
// rather than silently decoded by encoding/json alone.
func TestDecodeFastKnowsEveryMember(t *testing.T) {
	var r chatRequest
	v := reflect.ValueOf(&r).Elem()
	seen := map[uint]string{}
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		bit, dst := requestMember(&r, name)
		if dst == nil || reflect.ValueOf(dst).Pointer() != v.Field(i).Addr().Pointer() {
			t.Errorf("member %q is not read into chatRequest.%s", name, v.Type().Field(i).Name)
		}
		if other, dup := seen[bit]; dup {
			t.Errorf("members %q and %q share bit %d", name, other, bit)
		}
		seen[bit] = name
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[chatMessage](), reflect.TypeFor[streamOptions](), reflect.TypeFor[responseFormat]()} {
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			body := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
			switch typ {
			case reflect.TypeFor[chatMessage]():
				body = `{"messages":[{"` + name + `":"x"}]}`
			case reflect.TypeFor[streamOptions]():
				body = `{"stream_options":{"` + name + `":true}}`
			case reflect.TypeFor[responseFormat]():
				body = `{"response_format":{"` + name + `":"x"}}`
			}
			var fast chatRequest
			if !fast.decodeFast([]byte(body)) {
				t.Errorf("%s member %q is left to encoding/json: %s", typ.Name(), name, body)
			}
		}
	}
}

// fastBodies are requests as clients send them: each takes the one-pass
// path.
var fastBodies = []string{
	`{"model":"sonnet","messages":[{"role":"user","content":"hi"}]}`,
	string(benchBody),
	string(longBody),
	`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false},"stop":["x"]}`,
	`{"model":"m","messages":[{"role":"user","content":"w"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"東京\"}"}}]},{"role":"tool","tool_call_id":"c","content":"晴れ"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"},"strict":true}}],"tool_choice":"required","parallel_tool_calls":false}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object"}}},"top_p":0.5,"temperature":0.2,"seed":-7,"n":1,"max_tokens":0,"metadata":{"k":"v"},"user":"u-1","modalities":["text"]}`,
	"{\"model\":\"m\",\n \"messages\": [ {\"role\" : \"user\", \"content\" : \"\\u3042\\ud83d\\ude00 \\\"q\\\" \\n\"} ] , \"stream\":null }  \n",
	`{"model":null,"messages":[null,{"role":"user","content":"x"}],"stop":null,"max_tokens":null,"modalities":[]}`,
}

// slowBodies are left to encoding/json: member names in another case,
// repeated members, unknown members, values of another type, and what is
// not JSON.
var slowBodies = []string{
	`{"Model":"m","messages":[]}`,
	`{"model":"a","model":"b"}`,
	`{"model":"m","messages":[{"role":"user","role":"system"}]}`,
	`{"model":"m","frobnicate":1}`,
	`{"model":"m","messages":[{"role":"user","content":"x","extra":1}]}`,
	`{"model":"m","max_tokens":1.5}`,
	`{"model":"m","max_tokens":"10"}`,
	`{"model":"m","temperature":1e999}`,
	`{"model":5}`,
	`{"model":"m"} {}`,
	`{"model":"m",}`,
	`[]`,
	"{\"model\":\"\xff\"}",
}

func TestDecodeFastTakesCommonBodies(t *testing.T) {
	for _, body := range fastBodies {
		var r chatRequest
		if !r.decodeFast([]byte(body)) {
			t.Errorf("left to encoding/json: %.120s", body)
		}
		checkFastAgrees(t, []byte(body))
	}
	for _, body := range slowBodies {
		var r chatRequest
		if r.decodeFast([]byte(body)) {
			t.Errorf("taken by the one-pass decoder: %s", body)
		}
	}
}

// checkFastAgrees fails when the one-pass decoder takes data and
// encoding/json, as decodeBody runs it, refuses it or decodes it otherwise.
func checkFastAgrees(t *testing.T, data []byte) {
	t.Helper()
	var fast chatRequest
	if !fast.decodeFast(data) {
		return
	}
	var slow chatRequest
	if e := decodeBody(data, &slow); e != nil {
		t.Fatalf("%q: one-pass decoder took it, encoding/json refused it: %s", data, e.Message)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q:\none-pass      %+v\nencoding/json %+v", data, fast, slow)
	}
}

// FuzzDecodeFast holds the one-pass decoder to encoding/json: whatever it
// takes, encoding/json takes and decodes to the same request.
func FuzzDecodeFast(f *testing.F) {
	for _, b := range append(fastBodies, slowBodies...) {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFastAgrees(t, data) })
}
