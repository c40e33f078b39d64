package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestRelativeLinksResolve: every relative link in README.md and docs/
// points to a file that exists and, with a #fragment into a Markdown file,
// to one of its headings.
func TestRelativeLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range Links(string(data)) {
			if isExternal(target) {
				continue
			}
			checked++
			name, fragment, _ := strings.Cut(target, "#")
			name, _, _ = strings.Cut(name, "?")
			dest := file
			if name != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(name))
			}
			rel, _ := filepath.Rel(root, file)
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel, target)
				continue
			}
			if fragment != "" && strings.HasSuffix(dest, ".md") {
				body, err := os.ReadFile(dest)
				if err != nil {
					t.Fatal(err)
				}
				if !Anchors(string(body))[fragment] {
					t.Errorf("%s links to %s, but %s has no heading #%s", rel, target, filepath.Base(dest), fragment)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d relative links in %d files; the scan lost some", checked, len(files))
	}
}

// TestLinksAndAnchors: links are found outside code, and anchors are made
// as GitHub makes them.
func TestLinksAndAnchors(t *testing.T) {
	md := "See [the fleet](docs/fleet.md#when-redis-goes-away) and ![a chart](docs/x.png \"t\").\n" +
		"`[not](a-link.md)`\n```\n[nor](this.md)\n```\n<https://example.com>\n"
	got := strings.Join(Links(md), " ")
	if want := "docs/fleet.md#when-redis-goes-away docs/x.png"; got != want {
		t.Errorf("Links = %q, want %q", got, want)
	}
	a := Anchors("# fmgate\n## A turn, top to bottom\n### `fmgate sim` as a stand-in\n## A turn, top to bottom\n")
	for _, want := range []string{"fmgate", "a-turn-top-to-bottom", "fmgate-sim-as-a-stand-in", "a-turn-top-to-bottom-1"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
}

func markdownFiles(t *testing.T) []string {
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	fence      = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```[^\n]*$")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	link       = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
)

// Links lists the targets of the Markdown links and images in md, outside
// code blocks and code spans.
func Links(md string) []string {
	md = fence.ReplaceAllString(md, "")
	md = inlineCode.ReplaceAllString(md, "")
	var out []string
	for _, m := range link.FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

// Anchors is the set of fragment names GitHub gives md's headings.
func Anchors(md string) map[string]bool {
	md = fence.ReplaceAllString(md, "")
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(md, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = a + "-" + itoa(n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

func itoa(n int) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		n /= 10
		if n == 0 {
			return s
		}
	}
}

func isExternal(target string) bool {
	return strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:")
}
