// Package docs checks the project's documentation against the code: the
// configuration reference against the fields of config.Config, the fmgate
// commands shown in README.md and docs/ against the command's own flag
// parsing, and every relative link against the files it points to.
package docs

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/config"
)

// Field is one configuration field, named by its path in a config file:
// YAML names joined by dots, "[]" after a list of mappings and ".*" for
// the key of a map (models[].name, breakers.*.openTimeout).
type Field struct {
	Path string
	// Type is the field's Go type.
	Type reflect.Type
	// Owner and Name are the struct type declaring the field and the Go
	// field's name, to find its doc comment.
	Owner reflect.Type
	Name  string
	// Default is the value of the default config, in YAML's words, or ""
	// where the default has no single value.
	Default string
}

var durationType = reflect.TypeOf(time.Duration(0))

// Fields lists every field of a config value, depth first in declaration
// order, with its default taken from v.
func Fields(v reflect.Value) []Field {
	var out []Field
	walk(v.Type(), []reflect.Value{v}, nil, "", &out)
	return out
}

// walk lists t's fields under path. values holds the default values at this
// path: one for a plain field, one per entry under a list or a map (so a
// default can be told per entry: "sonnet 3, haiku 0.25"); keys names them.
func walk(t reflect.Type, values []reflect.Value, keys []string, path string, out *[]Field) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
		values = deref(values)
	}
	if t.Kind() != reflect.Struct || t == durationType {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline, ok := config.YAMLName(f)
		if !ok {
			continue
		}
		fv := fieldValues(values, i)
		if inline {
			walk(f.Type, fv, keys, path, out)
			continue
		}
		p := name
		if path != "" {
			p = path + "." + name
		}
		*out = append(*out, Field{Path: p, Type: f.Type, Owner: t, Name: f.Name, Default: describe(f.Type, fv, keys)})
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Slice && isStruct(ft.Elem()):
			ev, ek := entries(fv, keys, func(v reflect.Value) ([]reflect.Value, []string) {
				var vs []reflect.Value
				var ks []string
				for j := range v.Len() {
					vs = append(vs, v.Index(j))
					ks = append(ks, entryName(v.Index(j), j))
				}
				return vs, ks
			})
			walk(ft.Elem(), ev, ek, p+"[]", out)
		case ft.Kind() == reflect.Map && isStruct(ft.Elem()):
			ev, ek := entries(fv, keys, func(v reflect.Value) ([]reflect.Value, []string) {
				ks := make([]string, 0, v.Len())
				for _, k := range v.MapKeys() {
					ks = append(ks, fmt.Sprint(k.Interface()))
				}
				sort.Strings(ks)
				vs := make([]reflect.Value, len(ks))
				for j, k := range ks {
					vs[j] = v.MapIndex(reflect.ValueOf(k).Convert(v.Type().Key()))
				}
				return vs, ks
			})
			walk(ft.Elem(), ev, ek, p+".*", out)
		case ft.Kind() == reflect.Struct && ft != durationType:
			walk(f.Type, fv, keys, p, out)
		}
	}
}

func isStruct(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t != durationType
}

func deref(values []reflect.Value) []reflect.Value {
	out := make([]reflect.Value, 0, len(values))
	for _, v := range values {
		if v.IsValid() && !v.IsNil() {
			out = append(out, v.Elem())
		} else {
			out = append(out, reflect.Value{})
		}
	}
	return out
}

func fieldValues(values []reflect.Value, i int) []reflect.Value {
	out := make([]reflect.Value, len(values))
	for j, v := range values {
		if v.IsValid() {
			out[j] = v.Field(i)
		}
	}
	return out
}

// entries expands each default value (a list or a map) into its entries,
// named by the entry (under an outer entry, "outer/inner").
func entries(values []reflect.Value, keys []string, expand func(reflect.Value) ([]reflect.Value, []string)) ([]reflect.Value, []string) {
	var vs []reflect.Value
	var ks []string
	for j, v := range values {
		for v.IsValid() && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v = reflect.Value{}
				break
			}
			v = v.Elem()
		}
		if !v.IsValid() {
			continue
		}
		ev, ek := expand(v)
		for n := range ek {
			if keys != nil {
				ek[n] = keys[j] + "/" + ek[n]
			}
		}
		vs = append(vs, ev...)
		ks = append(ks, ek...)
	}
	return vs, ks
}

// entryName names a list entry by its name field when it has one.
func entryName(v reflect.Value, i int) string {
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
		if f := v.FieldByName("Name"); f.IsValid() && f.Kind() == reflect.String && f.String() != "" {
			return f.String()
		}
	}
	return fmt.Sprintf("#%d", i)
}

// describe is the default of a field in YAML's words: its value, or one
// value per default entry when they differ ("sonnet: 5, haiku: 8").
func describe(t reflect.Type, values []reflect.Value, keys []string) string {
	if keys == nil {
		if len(values) != 1 || !values[0].IsValid() {
			return ""
		}
		return yamlValue(values[0])
	}
	if len(values) == 0 {
		return ""
	}
	same := true
	first := yamlValue(values[0])
	for _, v := range values[1:] {
		if yamlValue(v) != first {
			same = false
			break
		}
	}
	if same {
		return first
	}
	named := true // the field that names the entries: sonnet, haiku
	for j, v := range values {
		named = named && yamlValue(v) == keys[j]
	}
	if named {
		return strings.Join(keys, ", ")
	}
	parts := make([]string, len(values))
	for j, v := range values {
		parts[j] = keys[j] + ": " + yamlValue(v)
	}
	return strings.Join(parts, ", ")
}

// yamlValue writes v as it would be written in a config file, briefly: a
// mapping or list of mappings by its keys or names.
func yamlValue(v reflect.Value) string {
	if !v.IsValid() {
		return ""
	}
	if v.Type() == durationType {
		return shortDuration(time.Duration(v.Int()))
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "none"
		}
		return yamlValue(v.Elem())
	case reflect.String:
		if v.String() == "" {
			return `""`
		}
		return v.String()
	case reflect.Bool:
		return fmt.Sprint(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprint(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprint(v.Uint())
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64)
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			return "[]"
		}
		parts := make([]string, v.Len())
		for j := range v.Len() {
			if isStruct(v.Type().Elem()) {
				parts[j] = entryName(v.Index(j), j)
			} else {
				parts[j] = yamlValue(v.Index(j))
			}
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case reflect.Map:
		if v.Len() == 0 {
			return "{}"
		}
		ks := make([]string, 0, v.Len())
		vals := map[string]string{}
		for _, k := range v.MapKeys() {
			name := fmt.Sprint(k.Interface())
			ks = append(ks, name)
			if !isStruct(v.Type().Elem()) {
				vals[name] = yamlValue(v.MapIndex(k))
			}
		}
		sort.Strings(ks)
		if isStruct(v.Type().Elem()) {
			return "entries " + strings.Join(ks, ", ")
		}
		parts := make([]string, len(ks))
		for j, k := range ks {
			parts[j] = k + ": " + vals[k]
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case reflect.Struct:
		return "" // its fields have rows of their own
	}
	return fmt.Sprint(v.Interface())
}

// shortDuration writes d as a config file would: 30s, 1h, 1m30s, 150ms.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
