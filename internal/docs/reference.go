package docs

import (
	"fmt"
	"regexp"
	"strings"
)

// The generated part of docs/configuration.md lies between these lines.
const (
	ReferenceBegin = "<!-- reference: generated from config.Config by `go test ./internal/docs -run TestConfigReference -update` -->"
	ReferenceEnd   = "<!-- end of reference -->"
)

// Reference writes the configuration reference: a section per top-level
// field, a row per field with its path, default and doc comment. A field
// with no comment in the code keeps the meaning written in keep, by path.
func Reference(fields []Field, c *Comments, keep map[string]string) (string, error) {
	var b strings.Builder
	b.WriteString(ReferenceBegin + "\n")
	section := ""
	for _, f := range fields {
		top, _, _ := strings.Cut(strings.SplitN(f.Path, "[", 2)[0], ".")
		if top != section {
			section = top
			fmt.Fprintf(&b, "\n### `%s`\n\n", top)
			b.WriteString("| field | default | meaning |\n|---|---|---|\n")
		}
		doc, err := c.Field(f)
		if err != nil {
			return "", err
		}
		if doc == "" { // a field of a documented type: Server is …
			if doc, err = c.Type(f.Type); err != nil {
				return "", err
			}
		}
		if doc == "" {
			doc = keep[f.Path]
		} else {
			doc = cell(doc)
		}
		def := ""
		if f.Default != "" {
			def = "`" + cell(f.Default) + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.Path, def, doc)
	}
	b.WriteString("\n" + ReferenceEnd + "\n")
	return b.String(), nil
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// row reads a row of the reference: its path and its meaning, as written.
var row = regexp.MustCompile("(?m)^\\| `([^`]+)` \\| (.*?) \\| (.*) \\|$")

// Meanings reads the meaning of each field documented in a reference, by
// path, so that what was written by hand survives a regeneration.
func Meanings(doc string) map[string]string {
	_, ref, _ := strings.Cut(doc, ReferenceBegin)
	ref, _, _ = strings.Cut(ref, ReferenceEnd)
	out := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(ref, -1) {
		out[m[1]] = strings.TrimSpace(m[3])
	}
	return out
}
