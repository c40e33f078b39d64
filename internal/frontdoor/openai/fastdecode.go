package openai

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/jsonscan"
)

// decodeFast decodes data into req as decodeBody does (encoding/json with
// unknown members refused), in one pass without reflection, when data is
// UTF-8 JSON whose every member is spelled as the API spells it and given
// once. It reports false for any other body, req then partly filled:
// decodeBody, decoding it again from a zero request, takes members in
// another case and repeated members as encoding/json does and names what
// is wrong with a bad body. FuzzDecodeFast holds the two to the same
// result.
func (req *chatRequest) decodeFast(data []byte) bool {
	if !utf8.Valid(data) {
		return false
	}
	p := jsonscan.New(string(data)) // one copy: req keeps no byte of data
	d := fastDecoder{p: &p}
	return p.Object(d.request(req)) == nil && p.End() == nil
}

// fastDecoder reads the values of a chatRequest's members; every method
// fails on a value of another JSON type than the field's.
type fastDecoder struct{ p *jsonscan.Scanner }

// errFallback is a member decodeFast leaves to encoding/json.
var errFallback = jsonscan.ErrSyntax

// once records member bit in *seen and fails when it was there already.
func once(seen *uint64, bit uint) error {
	if *seen&(1<<bit) != 0 {
		return errFallback
	}
	*seen |= 1 << bit
	return nil
}

func (d fastDecoder) request(req *chatRequest) func(string) error {
	var seen uint64
	return func(key string) error {
		bit, dst := requestMember(req, key)
		if dst == nil {
			return errFallback // unknown, or in another case
		}
		if err := once(&seen, bit); err != nil {
			return err
		}
		switch v := dst.(type) {
		case *string:
			return d.str(v)
		case **string:
			return opt(d, v, d.str)
		case **bool:
			return opt(d, v, d.bool)
		case **int:
			return opt(d, v, d.int)
		case **int64:
			return opt(d, v, d.int64)
		case **float64:
			return opt(d, v, d.float)
		case *json.RawMessage:
			return d.raw(v)
		case *[]string:
			return d.strings(v)
		case *[]chatMessage:
			return d.messages(v)
		case **streamOptions:
			return opt(d, v, d.streamOptions)
		case **responseFormat:
			return opt(d, v, d.responseFormat)
		}
		return errFallback
	}
}

// requestMember is the field of req a member names, and its bit among
// the members seen.
func requestMember(r *chatRequest, key string) (uint, any) {
	switch key {
	case "model":
		return 0, &r.Model
	case "messages":
		return 1, &r.Messages
	case "stream":
		return 2, &r.Stream
	case "stream_options":
		return 3, &r.StreamOptions
	case "max_tokens":
		return 4, &r.MaxTokens
	case "max_completion_tokens":
		return 5, &r.MaxCompletionTokens
	case "temperature":
		return 6, &r.Temperature
	case "stop":
		return 7, &r.Stop
	case "user":
		return 8, &r.User
	case "prompt_cache_key":
		return 9, &r.PromptCacheKey
	case "n":
		return 10, &r.N
	case "logprobs":
		return 11, &r.Logprobs
	case "top_p":
		return 12, &r.TopP
	case "seed":
		return 13, &r.Seed
	case "presence_penalty":
		return 14, &r.PresencePenalty
	case "frequency_penalty":
		return 15, &r.FrequencyPenalty
	case "store":
		return 16, &r.Store
	case "response_format":
		return 17, &r.ResponseFormat
	case "modalities":
		return 18, &r.Modalities
	case "tools":
		return 19, &r.Tools
	case "tool_choice":
		return 20, &r.ToolChoice
	case "parallel_tool_calls":
		return 21, &r.ParallelToolCalls
	case "functions":
		return 22, &r.Functions
	case "function_call":
		return 23, &r.FunctionCall
	case "top_logprobs":
		return 24, &r.TopLogprobs
	case "logit_bias":
		return 25, &r.LogitBias
	case "audio":
		return 26, &r.Audio
	case "prediction":
		return 27, &r.Prediction
	case "web_search_options":
		return 28, &r.WebSearchOptions
	case "metadata":
		return 29, &r.Metadata
	case "reasoning_effort":
		return 30, &r.ReasoningEffort
	case "verbosity":
		return 31, &r.Verbosity
	case "service_tier":
		return 32, &r.ServiceTier
	case "safety_identifier":
		return 33, &r.SafetyIdentifier
	}
	return 0, nil
}

// opt reads a value into a new *T, or null as nil.
func opt[T any](d fastDecoder, dst **T, read func(*T) error) error {
	if d.p.Null() {
		*dst = nil
		return nil
	}
	v := new(T)
	if err := read(v); err != nil {
		return err
	}
	*dst = v
	return nil
}

// str reads a string; null leaves dst as it is, as encoding/json does.
func (d fastDecoder) str(dst *string) error {
	if d.p.Null() {
		return nil
	}
	s, err := d.p.Str()
	*dst = s
	return err
}

func (d fastDecoder) bool(dst *bool) error {
	if d.p.Null() {
		return nil
	}
	b, err := d.p.Bool()
	*dst = b
	return err
}

// number reads a number's text.
func (d fastDecoder) number() (string, error) {
	if d.p.Peek() == '"' {
		return "", errFallback
	}
	return d.p.Raw()
}

func (d fastDecoder) int(dst *int) error {
	tok, err := d.number()
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(tok, 10, strconv.IntSize)
	*dst = int(n)
	return err
}

func (d fastDecoder) int64(dst *int64) error {
	tok, err := d.number()
	if err != nil {
		return err
	}
	*dst, err = strconv.ParseInt(tok, 10, 64)
	return err
}

func (d fastDecoder) float(dst *float64) error {
	tok, err := d.number()
	if err != nil {
		return err
	}
	*dst, err = strconv.ParseFloat(tok, 64)
	return err
}

// raw keeps a value's text, null included, as json.RawMessage does.
func (d fastDecoder) raw(dst *json.RawMessage) error {
	s, err := d.p.Raw()
	*dst = json.RawMessage(s)
	return err
}

// strings reads an array of strings, or null as nil.
func (d fastDecoder) strings(dst *[]string) error {
	if d.p.Null() {
		*dst = nil
		return nil
	}
	out := []string{}
	err := d.p.Array(func() error {
		var s string
		err := d.str(&s)
		out = append(out, s)
		return err
	})
	*dst = out
	return err
}

// messages reads the messages array, or null as nil.
func (d fastDecoder) messages(dst *[]chatMessage) error {
	if d.p.Null() {
		*dst = nil
		return nil
	}
	out := make([]chatMessage, 0, 4)
	err := d.p.Array(func() error {
		out = append(out, chatMessage{})
		m := &out[len(out)-1]
		if d.p.Null() {
			return nil
		}
		var seen uint64
		return d.p.Object(func(key string) error {
			var bit uint
			var dst *json.RawMessage
			switch key {
			case "role":
				if err := once(&seen, 0); err != nil {
					return err
				}
				return d.str(&m.Role)
			case "content":
				bit, dst = 1, &m.Content
			case "name":
				bit, dst = 2, &m.Name
			case "tool_calls":
				bit, dst = 3, &m.ToolCalls
			case "tool_call_id":
				bit, dst = 4, &m.ToolCallID
			case "function_call":
				bit, dst = 5, &m.FunctionCall
			case "refusal":
				bit, dst = 6, &m.Refusal
			case "audio":
				bit, dst = 7, &m.Audio
			default:
				return errFallback
			}
			if err := once(&seen, bit); err != nil {
				return err
			}
			return d.raw(dst)
		})
	})
	*dst = out
	return err
}

func (d fastDecoder) streamOptions(dst *streamOptions) error {
	var seen uint64
	return d.p.Object(func(key string) error {
		switch key {
		case "include_usage":
			if err := once(&seen, 0); err != nil {
				return err
			}
			return d.bool(&dst.IncludeUsage)
		case "include_obfuscation":
			if err := once(&seen, 1); err != nil {
				return err
			}
			return opt(d, &dst.IncludeObfuscation, d.bool)
		}
		return errFallback
	})
}

func (d fastDecoder) responseFormat(dst *responseFormat) error {
	var seen uint64
	return d.p.Object(func(key string) error {
		switch key {
		case "type":
			if err := once(&seen, 0); err != nil {
				return err
			}
			return d.str(&dst.Type)
		case "json_schema":
			if err := once(&seen, 1); err != nil {
				return err
			}
			return d.raw(&dst.JSONSchema)
		}
		return errFallback
	})
}
