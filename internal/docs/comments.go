package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// Comments reads the doc comments of struct fields from the module's
// source, so the configuration reference can say what the code says.
type Comments struct {
	root, module string
	// types maps "import/path.TypeName" to the struct's field comments.
	types map[string]map[string]string
}

// NewComments reads field comments from the module rooted at root.
func NewComments(root string) (*Comments, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, fmt.Errorf("docs: %w", err)
	}
	var module string
	for _, line := range strings.Split(string(data), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			module = strings.TrimSpace(m)
			break
		}
	}
	if module == "" {
		return nil, fmt.Errorf("docs: %s/go.mod names no module", root)
	}
	return &Comments{root: root, module: module, types: map[string]map[string]string{}}, nil
}

// Field returns the doc comment of f's Go field as one paragraph. A field
// without a comment of its own, declared on the line after a field that has
// one, shares it ("// Price per million tokens." over three fields).
func (c *Comments) Field(f Field) (string, error) {
	fields, err := c.structFields(f.Owner)
	if err != nil {
		return "", err
	}
	if doc := fields[f.Name]; doc != "" {
		return doc, nil
	}
	// A type's comment may say what its fields do ("… multiplied by
	// BaseMultiplier …").
	if doc := fields["\x00type"]; strings.Contains(doc, f.Name) {
		return doc, nil
	}
	return "", nil
}

// Type returns the doc comment of a named struct type, or "".
func (c *Comments) Type(t reflect.Type) (string, error) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Name() == "" || !strings.HasPrefix(t.PkgPath(), c.module) {
		return "", nil
	}
	if _, err := c.structFields(t); err != nil {
		return "", err
	}
	return c.types[t.PkgPath()+"."+t.Name()]["\x00type"], nil
}

func (c *Comments) structFields(t reflect.Type) (map[string]string, error) {
	key := t.PkgPath() + "." + t.Name()
	if m, ok := c.types[key]; ok {
		return m, nil
	}
	m := map[string]string{}
	c.types[key] = m
	if !strings.HasPrefix(t.PkgPath(), c.module) {
		return m, nil
	}
	dir := filepath.Join(c.root, filepath.FromSlash(strings.TrimPrefix(strings.TrimPrefix(t.PkgPath(), c.module), "/")))
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, fmt.Errorf("docs: %w", err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("docs: %w", err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok || ts.Name.Name != t.Name() {
					continue
				}
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				m["\x00type"] = paragraph(doc.Text())
				prevDoc, prevEnd, prevNamed := "", -1, false
				for _, fld := range st.Fields.List {
					text := paragraph(fld.Doc.Text())
					if text == "" {
						text = paragraph(fld.Comment.Text())
					}
					line := fset.Position(fld.Pos()).Line
					if fld.Doc != nil {
						line = fset.Position(fld.Doc.Pos()).Line
					}
					if text == "" && line == prevEnd+1 && len(fld.Names) > 0 &&
						(!prevNamed || strings.Contains(prevDoc, fld.Names[0].Name)) {
						text = prevDoc
					}
					names := make([]string, 0, len(fld.Names))
					for _, n := range fld.Names {
						names = append(names, n.Name)
					}
					if len(names) == 0 { // embedded
						names = append(names, embeddedName(fld.Type))
					}
					for _, n := range names {
						m[n] = text
					}
					// A comment that starts with its field's name ("Profile
					// names …") is that field's alone, unless it names the
					// next ones too ("SessionInput and SessionOutput …"); one
					// that does not ("Price per million tokens.") covers the
					// fields declared right below it.
					prevDoc, prevEnd = text, fset.Position(fld.End()).Line
					prevNamed = strings.HasPrefix(text, names[0]+" ")
				}
			}
		}
	}
	return m, nil
}

func embeddedName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.StarExpr:
		return embeddedName(x.X)
	}
	return ""
}

// paragraph joins a comment's lines into one.
func paragraph(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
