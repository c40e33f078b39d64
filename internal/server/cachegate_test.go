package server

import (
	"strings"
	"testing"
)

// TestAReplyThatDidNotAnswerIsNotCached: the simulator meets a question it
// has no topic for with its greeting; that greeting must not be cached as
// the question's answer, where, with the models down, it would stand in
// front of the FAQ. A real answer to a question is cached (the control).
func TestAReplyThatDidNotAnswerIsNotCached(t *testing.T) {
	sc := newScenario(t, quickConfig())
	const offTopic, onTopic = "Can you order sushi for my birthday party?", "Which comedy manga is the funniest?"
	a := sc.chat("asker", offTopic, "en")
	if a.Status != 200 || a.Tier != "sonnet" || !strings.Contains(a.Text, "MangaAssist") {
		t.Fatalf("off-topic question: %+v; want the simulator's greeting from sonnet (the test proves nothing otherwise)", a)
	}
	if a := sc.chat("asker-2", onTopic, "en"); a.Status != 200 || a.Tier != "sonnet" {
		t.Fatalf("on-topic question: %+v", a)
	}
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	adminPut(t, sc.srv, "/admin/sim/haiku", `{"outage":true}`)
	if a := sc.chat("next-asker", onTopic, "en"); a.Tier != "cache" {
		t.Fatalf("an answer was not cached: %+v (the test proves nothing)", a)
	}
	if a := sc.chat("next-asker", offTopic, "en"); a.Tier == "cache" {
		t.Errorf("the greeting was cached as the answer to %q: %q", offTopic, a.Text)
	}
}
