package sim

import (
	"strings"

	"github.com/fmgate/fmgate/internal/judge"
	"github.com/fmgate/fmgate/internal/provider"
)

// judgeReply answers a request of the eval judge (its system prompt opens
// with judge.Marker) with the deterministic grader's JSON verdict, so the
// quality loop runs on the simulator with sensible, repeatable scores.
func judgeReply(req *provider.Request) (string, bool) {
	if !strings.HasPrefix(req.System, judge.Marker) {
		return "", false
	}
	c, ok := judge.ParseMessage(lastUserMessage(req))
	if !ok {
		return "I cannot grade this: the question and answer to judge are missing.", true
	}
	return judge.Reply(c), true
}
