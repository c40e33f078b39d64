package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fmgate judge grades a payload export offline: a verdict per record, the
// rubric's scores (an answer in the question's language above one in
// another), and a summary.
func TestJudgeGradesADataset(t *testing.T) {
	dataset := filepath.Join(t.TempDir(), "export.jsonl")
	lines := `{"traceId":"` + strings.Repeat("a", 32) + `","at":"2026-11-28T05:00:00Z","userIdHash":"u","feature":"chat","payload":{"locale":"ja","question":"おすすめの少年漫画は？","answer":"『ワンピース』はいかがでしょう。冒険と友情の物語で、長く愛されている少年漫画です。","tier":"sonnet","source":"model"}}
{"traceId":"` + strings.Repeat("b", 32) + `","at":"2026-11-28T05:01:00Z","userIdHash":"u","feature":"chat","payload":{"locale":"ja","question":"おすすめの少年漫画は？","answer":"I would recommend One Piece, a long-running adventure about friendship.","tier":"sonnet","source":"model"}}
`
	if err := os.WriteFile(dataset, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"judge", "-dataset", dataset}, &out, &errOut); err != nil {
		t.Fatalf("fmgate judge: %v\n%s", err, errOut.String())
	}
	// A verdict's line, or the summary's (judged).
	type line struct {
		TraceID string   `json:"traceId"`
		Overall *float64 `json:"overall"`
		Scores  struct {
			LanguageMatch float64 `json:"language_match"`
		} `json:"scores"`
		Error  string `json:"error"`
		Judged int    `json:"judged"`
	}
	var verdicts []line
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var v line
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		verdicts = append(verdicts, v)
	}
	if len(verdicts) != 3 || verdicts[2].Judged != 2 || verdicts[0].Error != "" || verdicts[0].Overall == nil || verdicts[1].Overall == nil {
		t.Fatalf("output:\n%s", out.String())
	}
	if verdicts[0].Scores.LanguageMatch != 1 || verdicts[1].Scores.LanguageMatch != 0 || *verdicts[1].Overall >= *verdicts[0].Overall {
		t.Errorf("the answer in the question's language scored %v, the English one %v:\n%s", *verdicts[0].Overall, *verdicts[1].Overall, out.String())
	}
	if err := run(context.Background(), []string{"judge"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "-dataset") {
		t.Errorf("fmgate judge without a dataset: %v", err)
	}
}
