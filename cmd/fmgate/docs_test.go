package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocumentedCommandsParse: every fmgate command shown in a code block of
// README.md or docs/ (fmgate …, ./fmgate …, go run ./cmd/fmgate …) is
// accepted by fmgate's own parsing: its command, flags and their values.
func TestDocumentedCommandsParse(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../../README.md"}, files...)
	n := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range documentedCommands(string(data)) {
			n++
			var stderr bytes.Buffer
			if err := checkArgs(c.args, &stderr); err != nil {
				t.Errorf("%s:%d: %q is refused: %v\n%s", filepath.Base(file), c.line, c.text, err, stderr.String())
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d fmgate commands in README.md and docs/; the scan lost some", n)
	}
}

// TestDocumentedCommandsCanFail: the check refuses what fmgate refuses.
func TestDocumentedCommandsCanFail(t *testing.T) {
	for _, line := range []string{
		"fmgate serve -confg fmgate.yaml",
		"fmgate validate",
		"go run ./cmd/fmgate serv",
		"fmgate ingest -batch 0",
		"fmgate scenario run primary-outgae",
		"fmgate scenario run all -rate fast",
	} {
		cs := documentedCommands("```sh\n" + line + "\n```\n")
		if len(cs) != 1 {
			t.Fatalf("%q: found %d commands, want 1", line, len(cs))
		}
		if err := checkArgs(cs[0].args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q was accepted", line)
		}
	}
}

// TestDocumentedCommandsFound: commands are found inside shell lines as
// written in the docs.
func TestDocumentedCommandsFound(t *testing.T) {
	md := "```sh\n" +
		"export X=1\n" +
		"FMGATE_PG_DSN=postgres://db/fmgate fmgate ingest -config fleet.yaml \\\n    -workers 2   # a comment\n" +
		"fmgate validate -config 'my file.yaml' && go run ./cmd/fmgate serve -config \"my file.yaml\" &\n" +
		"(cd gw1 && fmgate serve -addr 127.0.0.1:8081) &\n" +
		"```\n" +
		"text fmgate serve -nope outside a code block\n"
	var got []string
	for _, c := range documentedCommands(md) {
		got = append(got, strings.Join(c.args, "|"))
	}
	want := []string{"ingest|-config|fleet.yaml|-workers|2", "validate|-config|my file.yaml", "serve|-config|my file.yaml", "serve|-addr|127.0.0.1:8081"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("found %q, want %q", got, want)
	}
}

type documentedCommand struct {
	text string
	line int
	args []string // after the program's name
}

var fenceLine = regexp.MustCompile("^\\s*```")

// documentedCommands finds the fmgate command lines in md's code blocks.
func documentedCommands(md string) []documentedCommand {
	var out []documentedCommand
	lines := strings.Split(md, "\n")
	in := false
	for i := 0; i < len(lines); i++ {
		if fenceLine.MatchString(lines[i]) {
			in = !in
			continue
		}
		if !in {
			continue
		}
		start, text := i+1, lines[i]
		for strings.HasSuffix(strings.TrimSpace(text), `\`) && i+1 < len(lines) {
			i++
			text = strings.TrimSuffix(strings.TrimSpace(text), `\`) + " " + lines[i]
		}
		for _, words := range shellCommands(text) {
			for len(words) > 0 && isAssignment(words[0]) {
				words = words[1:]
			}
			var args []string
			switch {
			case len(words) > 0 && (words[0] == "fmgate" || strings.HasSuffix(words[0], "/fmgate")):
				args = words[1:]
			case len(words) > 2 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/fmgate":
				args = words[3:]
			default:
				continue
			}
			out = append(out, documentedCommand{text: strings.Join(words, " "), line: start, args: args})
		}
	}
	return out
}

// shellCommands splits a shell line into its commands' words: quotes
// honoured, a comment dropped, commands separated by ; & && || | and
// parentheses.
func shellCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var word strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			word.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '#' && !inWord:
			endCmd()
			return cmds
		case c == ' ' || c == '\t':
			endWord()
		case c == ';' || c == '&' || c == '|' || c == '(' || c == ')':
			endCmd()
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
