package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"
)

// recallFloor is the least recall@5 each language's labelled set must keep.
const recallFloor = 0.9

type labelled struct {
	Q    string   `yaml:"q"`
	Want []string `yaml:"want"`
}

func loadQuestions(t testing.TB) map[string][]labelled {
	t.Helper()
	data, err := os.ReadFile("testdata/questions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var qs map[string][]labelled
	if err := yaml.Unmarshal(data, &qs); err != nil {
		t.Fatal(err)
	}
	return qs
}

var (
	sharedOnce  sync.Once
	sharedIndex *Index
	sharedErr   error
)

// newTestIndex is the embedded catalog's index, built once for the
// package's tests (read-only, so they may share it).
func newTestIndex(t testing.TB) *Index {
	t.Helper()
	sharedOnce.Do(func() {
		var items []Item
		if items, sharedErr = Load(DefaultConfig()); sharedErr == nil {
			sharedIndex, sharedErr = New(context.Background(), items)
		}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedIndex
}

// recallAt5 averages, over questions, the share of labelled items in the
// top 5 that search returns.
func recallAt5(t testing.TB, search func(q string, k int) ([]Hit, error), qs []labelled) (float64, []string) {
	var sum float64
	var misses []string
	for _, q := range qs {
		hits, err := search(q.Q, 5)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, h := range hits {
			got[h.Item.ID] = true
		}
		found := 0
		for _, id := range q.Want {
			if got[id] {
				found++
			} else {
				misses = append(misses, fmt.Sprintf("%q: %s not in top 5", q.Q, id))
			}
		}
		sum += float64(found) / float64(len(q.Want))
	}
	return sum / float64(len(qs)), misses
}

func TestRecallAt5(t *testing.T) {
	ix := newTestIndex(t)
	for lang, qs := range loadQuestions(t) {
		t.Run(lang, func(t *testing.T) {
			if len(qs) < 30 {
				t.Fatalf("%d labelled questions; want at least 30", len(qs))
			}
			r, misses := recallAt5(t, func(q string, k int) ([]Hit, error) { return ix.Search(context.Background(), q, k) }, qs)
			t.Logf("recall@5 %s = %.3f over %d questions", lang, r, len(qs))
			for _, m := range misses {
				t.Log(m)
			}
			if r < recallFloor {
				t.Errorf("recall@5 = %.3f, want >= %.2f", r, recallFloor)
			}
		})
	}
}

func TestSearchFindsLatestVolume(t *testing.T) {
	ix := newTestIndex(t)
	tests := []struct{ q, want string }{
		{"ワンピースの最新刊は？", "MA001-V110"},
		{"What's the latest One Piece volume?", "MA001-V110"},
		{"ＯＮＥ　ＰＩＥＣＥの最新刊", "MA001-V110"}, // full-width letters fold
	}
	for _, tt := range tests {
		hits, err := ix.Search(context.Background(), tt.q, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) == 0 || hits[0].Item.ID != tt.want {
			ids := []string{}
			for _, h := range hits {
				ids = append(ids, h.Item.ID)
			}
			t.Errorf("Search(%q) = %v, want %s first", tt.q, ids, tt.want)
		}
	}
}

func TestFaults(t *testing.T) {
	ix := NewService(newTestIndex(t))
	ix.SetFaults(Faults{Fail: true})
	if _, err := ix.Search(context.Background(), "One Piece", 5); !errors.Is(err, ErrFault) {
		t.Fatalf("err = %v, want ErrFault", err)
	}
	ix.SetFaults(Faults{LatencyMs: 60_000})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the caller's deadline has passed: the slow search gives up at once
	if _, err := ix.Search(ctx, "One Piece", 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	ix.SetFaults(Faults{})
	if hits, err := ix.Search(context.Background(), "One Piece", 5); err != nil || len(hits) == 0 {
		t.Fatalf("after clearing faults: %v, %v", hits, err)
	}
}

func TestContextRoundTrip(t *testing.T) {
	ix := newTestIndex(t)
	hits, _ := ix.Search(context.Background(), "ワンピースの最新刊は？", 3)
	var lines []string
	for _, h := range hits {
		lines = append(lines, Line(h.Item))
	}
	system := "You are MangaAssist.\n\n" + Context(lines)
	got := ParseContext(system)
	if len(got) != len(hits) {
		t.Fatalf("parsed %d entries, want %d", len(got), len(hits))
	}
	first := got[0]
	if first.ID != "MA001-V110" || first.Volume != 110 || first.PriceJPY != 528 || !first.Latest || first.SeriesJA != "ワンピース" || first.Series != "One Piece" {
		t.Errorf("first entry = %+v", first)
	}
	if ParseContext("You are MangaAssist.") != nil {
		t.Error("a prompt without catalog context parsed entries")
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct{ name, give, want string }{
		{"duplicate", "items:\n  - {id: A, titleJa: a, titleEn: a, stock: in_stock}\n  - {id: A, titleJa: b, titleEn: b, stock: in_stock}\n", "duplicate id"},
		{"stock", "items:\n  - {id: A, titleJa: a, titleEn: a, stock: plenty}\n", "unknown stock"},
		{"unknown field", "items:\n  - {id: A, titel: a}\n", "decode"},
		{"too many", "items:\n  - {id: A, titleJa: a, titleEn: a, stock: in_stock}\n  - {id: B, titleJa: b, titleEn: b, stock: in_stock}\n", "limit is 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit := 10
			if tt.name == "too many" {
				limit = 1
			}
			_, err := Parse([]byte(tt.give), limit)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestCatalogIsGenerated keeps the committed catalog equal to the
// generator's output.
func TestCatalogIsGenerated(t *testing.T) {
	out := filepath.Join(t.TempDir(), "catalog.yaml")
	cmd := exec.Command("go", "run", "./gen", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./gen: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, embedded) {
		t.Error("catalog.yaml differs from the generator's output; run go generate ./internal/catalog")
	}
}

func BenchmarkBuild(b *testing.B) {
	items, err := Load(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		ix, err := New(context.Background(), items)
		if err != nil {
			b.Fatal(err)
		}
		_ = ix.Close()
	}
}

func BenchmarkSearch(b *testing.B) {
	ix := newTestIndex(b)
	for b.Loop() {
		if _, err := ix.Search(context.Background(), "ワンピースの最新刊は？", 5); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseContext: the simulator reads catalog context out of whatever
// system prompt arrives on its wire; any text must parse without panicking,
// and every entry it yields has an id.
func FuzzParseContext(f *testing.F) {
	f.Add(ContextHeader + "\n- id=MA001-V110 | series=ワンピース / One Piece | volume=110 | latest=yes | price=¥528 | stock=in_stock")
	f.Add(ContextHeader + "\n- id= | price=¥ | volume=x\n- id=A | series=no slash | =\n")
	f.Add("no context at all")
	f.Fuzz(func(t *testing.T, s string) {
		for _, e := range ParseContext(s) {
			if e.ID == "" {
				t.Fatalf("entry without id from %q", s)
			}
		}
	})
}
