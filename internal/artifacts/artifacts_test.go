package artifacts

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fileSource(path string) PromptSource {
	return func() (string, string, string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", "", "", err
		}
		return "planner-prompt", string(b), path, nil
	}
}

func TestVersionIsContentHash(t *testing.T) {
	a, b := Version("planner-prompt", "hello"), Version("planner-prompt", "hello!")
	if a == b || !strings.HasPrefix(a, "planner-prompt@") || len(a) != len("planner-prompt@")+12 {
		t.Fatalf("versions %q %q", a, b)
	}
	// sha256("hello") = 2cf24dba5fb0a30e…
	if a != "planner-prompt@2cf24dba5fb0" {
		t.Fatalf("Version = %q", a)
	}
}

func TestReloadSwitchesAndKeepsOnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "prompt.txt")
	if err := os.WriteFile(path, []byte("v1 text"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	l, err := New(Graph{Version: "v17.4", ConfigHash: "abc"}, []Model{{Name: "sonnet", ModelID: "m1", Provider: "sim"}}, nil,
		fileSource(path), func() time.Time { return now }, nil)
	if err != nil {
		t.Fatal(err)
	}
	text, v1 := l.Active()
	if text != "v1 text" || v1 != Version("planner-prompt", "v1 text") {
		t.Fatalf("active %q %q", text, v1)
	}
	if changed, err := l.Reload(); err != nil || changed {
		t.Fatalf("unchanged reload: changed=%v err=%v", changed, err)
	}

	if err := os.WriteFile(path, []byte("v2 text"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := l.Reload(); err != nil || !changed {
		t.Fatalf("reload after edit: changed=%v err=%v", changed, err)
	}
	_, v2 := l.Active()
	if v2 != Version("planner-prompt", "v2 text") {
		t.Fatalf("active after edit %q", v2)
	}

	// A broken source keeps the prompt in force.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reload(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reload of a missing file: %v", err)
	}
	if _, v := l.Active(); v != v2 {
		t.Fatalf("active after failed reload %q, want %q", v, v2)
	}

	vs := l.Versions()
	if len(vs.Prompts) != 2 || vs.Prompts[0].Version != v1 || vs.Prompts[0].Active || vs.Prompts[1].Version != v2 || !vs.Prompts[1].Active {
		t.Fatalf("prompts %+v", vs.Prompts)
	}
	if vs.Graph.Version != "v17.4" || len(vs.Models) != 1 || vs.Tools == nil {
		t.Fatalf("versions %+v", vs)
	}
}

func TestEmptyPromptRefused(t *testing.T) {
	_, err := New(Graph{}, nil, nil, func() (string, string, string, error) { return "p", "", "", nil }, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("New with an empty prompt: %v", err)
	}
}

func TestHandler(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "prompt.txt")
	if err := os.WriteFile(path, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := New(Graph{Version: "v1"}, nil, nil, fileSource(path), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := l.Handler()
	if err := os.WriteFile(path, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/admin/versions/reload", nil))
	var got struct {
		Changed bool   `json:"changed"`
		Active  string `json:"active"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 || !got.Changed || got.Active != Version("planner-prompt", "two") {
		t.Fatalf("reload: %d %s", rec.Code, rec.Body)
	}

	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/admin/versions/reload", nil))
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "unchanged") {
		t.Fatalf("bad reload: %d %s", rec.Code, rec.Body)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/versions", nil))
	var vs Versions
	if err := json.Unmarshal(rec.Body.Bytes(), &vs); err != nil || len(vs.Prompts) != 2 || !vs.Prompts[1].Active {
		t.Fatalf("versions: %d %s", rec.Code, rec.Body)
	}
}

// The embedding tiers are listed apart from the models, [] when none, and
// follow a reload.
func TestVersionsListEmbeddingsApart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "prompt.txt")
	if err := os.WriteFile(path, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := New(Graph{Version: "v1"}, []Model{{Name: "sonnet"}}, nil, fileSource(path), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func() string {
		rec := httptest.NewRecorder()
		l.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/versions", nil))
		return rec.Body.String()
	}
	if body := get(); !strings.Contains(body, `"embeddings":[]`) {
		t.Fatalf("no embedding tier: %s", body)
	}
	l.SetEmbeddings([]Model{{Name: "titan-embed", ModelID: "amazon.titan-embed-text-v2:0", Provider: "sim"}})
	var vs Versions
	if err := json.Unmarshal([]byte(get()), &vs); err != nil || len(vs.Models) != 1 || vs.Models[0].Name != "sonnet" ||
		len(vs.Embeddings) != 1 || vs.Embeddings[0].Name != "titan-embed" {
		t.Fatalf("versions %+v (%v): want sonnet among the models and titan-embed apart", vs, err)
	}
}
