package main

import (
	"bufio"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/anthropic"
)

// TestSimServesAnthropic runs `fmgate sim` on a real listener and asks it
// for a streamed and a JSON answer through fmgate's anthropic provider
// (anthropic-sdk-go), by the MangaAssist Haiku's modelId.
func TestSimServesAnthropic(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- simulate(ctx, []string{"-addr", "127.0.0.1:0"}, pw, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sim: %v", err)
		}
	})
	banner, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url := regexp.MustCompile(`http://[0-9.:]+`).FindString(banner)
	if url == "" {
		t.Fatalf("no address in %q", banner)
	}

	haiku, _ := config.Default().Model("haiku")
	haiku.Provider, haiku.APIKeyEnv, haiku.Endpoint = "anthropic", "KEY", url
	p, err := anthropic.New(haiku, func(string) string { return "any" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := &provider.Request{Model: "haiku", MaxTokens: 300, Messages: []provider.Message{{Role: provider.RoleUser, Content: "Recommend a manga"}}}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	var got strings.Builder
	resp, err := p.Stream(cctx, req, func(s string) error { got.WriteString(s); return nil })
	if err != nil || got.String() == "" || resp.Usage.OutputTokens == 0 || resp.ModelID != haiku.ModelID {
		t.Fatalf("stream: %v, text %q, response %+v", err, got.String(), resp)
	}
	resp, err = p.Complete(cctx, req)
	if err != nil || resp.Text == "" || resp.Usage.InputTokens == 0 {
		t.Fatalf("complete: %v, response %+v", err, resp)
	}
}
