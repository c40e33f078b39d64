package config

import (
	"bytes"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// fieldProblems walks a YAML document against the Config type and lists
// each field that does not exist, by its path and with the closest known
// name ("server.adr: unknown field (did you mean addr?)"), and each value of
// the wrong kind, by its path and in YAML's words, never Go's type names or
// the file's line numbers alone. It also keeps the path of every line, to
// place the decoder's own errors.
func fieldProblems(data []byte) (*fieldWalker, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &Problems{List: []string{syntaxProblem(data, err)}}
	}
	w := &fieldWalker{lines: map[int]string{}}
	if len(doc.Content) > 0 {
		w.walk(doc.Content[0], reflect.TypeOf(Config{}), "")
	}
	return w, nil
}

// unknownSimModels reports each model the file sets under sim.models that
// is no model tier nor embedding tier of cfg: its settings would never be
// used.
func (w *fieldWalker) unknownSimModels(cfg Config) []string {
	var out []string
	for _, name := range w.simModels {
		_, chat := cfg.Model(name)
		_, embed := cfg.Embedding(name)
		if !chat && !embed {
			tiers := make([]string, len(cfg.Models))
			for i, m := range cfg.Models {
				tiers[i] = m.Name
			}
			msg := fmt.Sprintf("sim.models.%s: no model tier is named %s (models are %s", name, name, strings.Join(tiers, ", "))
			if len(cfg.Embeddings) > 0 {
				embeds := make([]string, len(cfg.Embeddings))
				for i, e := range cfg.Embeddings {
					embeds[i] = e.Name
				}
				msg += "; embedding tiers are " + strings.Join(embeds, ", ")
			}
			out = append(out, msg+")")
		}
	}
	return out
}

type fieldWalker struct {
	problems []string
	lines    map[int]string
	// simModels are the names the file sets under sim.models.
	simModels []string
}

var durationType = reflect.TypeOf(time.Duration(0))

func (w *fieldWalker) walk(n *yaml.Node, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if path != "" {
		w.lines[n.Line] = path
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			w.add(path, "must be a duration such as 10s or 500ms")
		} // the decoder reports a scalar that is not a duration
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			w.add(path, "must be a mapping of fields")
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i].Value, n.Content[i+1]
			ft, ok := fields[key]
			if !ok {
				w.lines[n.Content[i].Line] = join(path, key)
				w.add(join(path, key), "unknown field"+suggest(key, fields))
				continue
			}
			w.walk(val, ft, join(path, key))
		}
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			w.add(path, "must be a mapping")
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if path == "sim.models" {
				w.simModels = append(w.simModels, n.Content[i].Value)
			}
			w.walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.add(path, "must be a list")
			return
		}
		for i, item := range n.Content {
			w.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		if n.Kind != yaml.ScalarNode {
			w.add(path, "must be "+kindWords(t))
		}
	}
}

func (w *fieldWalker) add(path, problem string) {
	w.problems = append(w.problems, path+": "+problem)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlFields maps the YAML names of t's fields (inline structs flattened)
// to their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline, ok := YAMLName(f)
		switch {
		case !ok:
		case inline:
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
		default:
			out[name] = f.Type
		}
	}
	return out
}

// YAMLName is the name struct field f has in a config file, as the YAML
// decoder sees it: its yaml tag's name, else its name in lower case.
// inline reports a struct whose fields stand in its parent's place; ok is
// false for a field the file cannot set (unexported, or tagged "-").
func YAMLName(f reflect.StructField) (name string, inline, ok bool) {
	if !f.IsExported() {
		return "", false, false
	}
	name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	switch {
	case name == "-":
		return "", false, false
	case strings.Contains(opts, "inline"):
		return "", true, true
	case name == "":
		name = strings.ToLower(f.Name)
	}
	return name, false, true
}

// suggest names the known field closest to key, when one is close.
func suggest(key string, fields map[string]reflect.Type) string {
	best, bestD := "", 1<<30
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if d := editDistance(strings.ToLower(key), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > max(2, len(key)/3) {
		return ""
	}
	return " (did you mean " + best + "?)"
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// kindWords says what a Go type holds in YAML's words.
func kindWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a single value"
}

var (
	yamlLine     = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	yamlUnmarsh  = regexp.MustCompile("cannot unmarshal !!(\\w+) `([^`]*)` into (.+)$")
	goTypeToWord = map[string]string{
		"int": "a whole number", "int64": "a whole number", "int32": "a whole number", "uint": "a whole number",
		"float64": "a number", "float32": "a number", "bool": "true or false", "string": "a string",
		"time.Duration": "a duration such as 10s or 500ms",
	}
)

// decodeProblem rewrites one of the YAML decoder's messages with the
// field's path (from lines) and without Go type names.
func decodeProblem(msg string, lines map[int]string) string {
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	line, _ := strconv.Atoi(m[1])
	where, ok := lines[line]
	if !ok {
		where = "line " + m[1]
	}
	rest := m[2]
	if u := yamlUnmarsh.FindStringSubmatch(rest); u != nil {
		want, known := goTypeToWord[u[3]]
		if !known {
			want = "a value of another kind"
		}
		return fmt.Sprintf("%s: must be %s, not %q", where, want, u[2])
	}
	return where + ": " + rest
}

// syntaxProblem reports a YAML syntax error at the line where the file
// stops being YAML. For some errors yaml.v3 names a line above it, where
// the enclosing mapping starts or the one before: a key indented too
// little on line 5, or a list item among keys, comes out as "line 3: did
// not find expected key". So the line is looked for again, as the first
// one at which the file's beginning fails with the same message.
func syntaxProblem(data []byte, err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if line := failingLine(data, m[2]); line > 0 {
			msg = fmt.Sprintf("line %d: %s", line, m[2])
		}
	}
	return "YAML syntax: " + msg
}

// maxSyntaxScanLines bounds failingLine's work, which grows with the
// square of the file's length; past it yaml.v3's line stands.
const maxSyntaxScanLines = 5000

// failingLine is the first line (from 1) such that data up to and
// including it fails to parse with message want, or 0 if none does.
func failingLine(data []byte, want string) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxSyntaxScanLines {
		return 0
	}
	end := 0
	for i, l := range lines {
		end += len(l)
		var n yaml.Node
		err := yaml.Unmarshal(data[:end], &n)
		if err == nil {
			continue
		}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil && m[2] == want {
			return i + 1
		}
	}
	return 0
}
