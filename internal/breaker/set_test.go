package breaker

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestSet(t *testing.T) {
	clock := newFakeClock()
	var tr transitions
	s := NewSet(MemoryFactory(clock.Now), Defaults(), WithTransitionHook(tr.add))
	if s.Get("sonnet") != s.Get("sonnet") {
		t.Fatal("Get returned different breakers for one name")
	}
	record(t, s.Get("sonnet"), "FFFFF")
	record(t, s.Get("haiku"), "SSSSSSFFFFF") // 45%: haiku opens at 8 failures or 50%

	snaps := s.Snapshots(context.Background())
	if got := snaps["sonnet"].State; got != Open {
		t.Errorf("sonnet is %s, want open", got)
	}
	if got := snaps["haiku"]; got.State != Closed || got.Failures != 5 {
		t.Errorf("haiku = %+v, want closed with 5 failures", got)
	}
	if len(snaps) != len(Defaults()) {
		t.Errorf("Snapshots has %d breakers, want the %d defaults", len(snaps), len(Defaults()))
	}
	if want := []string{"closed->open"}; !slices.Equal(tr.get(), want) {
		t.Errorf("transitions = %v, want %v", tr.get(), want)
	}

	unknown := s.Get("gpt-oss")
	record(t, unknown, "FFFFF")
	wantState(t, unknown, Open, "an unconfigured name uses DefaultConfig (5 failures)")

	js, err := json.Marshal(s.Snapshots(context.Background())["sonnet"])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"state":"open"`) {
		t.Errorf("snapshot JSON %s lacks the state name", js)
	}
}

func TestStateString(t *testing.T) {
	tests := []struct {
		give State
		want string
	}{
		{Closed, "closed"},
		{Open, "open"},
		{HalfOpen, "half_open"},
		{State(9), "state(9)"},
	}
	for _, tt := range tests {
		if got := tt.give.String(); got != tt.want {
			t.Errorf("State(%d).String() = %q, want %q", int(tt.give), got, tt.want)
		}
	}
}
