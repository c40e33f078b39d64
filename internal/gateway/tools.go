package gateway

import (
	"errors"
	"fmt"

	"github.com/fmgate/fmgate/internal/provider"
)

// checkToolCalls reports an answer whose tool calls the client could not
// run: a call of a tool not offered, a call the choice forbids, or a forced
// call that did not come. It is the tier's failure (the cascade goes on),
// since the client's code would break on it.
func checkToolCalls(t *Turn, model string, r *provider.Response) error {
	if len(r.ToolCalls) == 0 {
		if t.ToolChoice.Forced() && r.StopReason != "max_tokens" {
			return badCalls(model, errors.New("the model answered in text although a tool call was required"))
		}
		return nil
	}
	if t.ToolChoice.Mode == provider.ToolNone {
		return badCalls(model, errors.New("the model called a tool although tool_choice was none"))
	}
	for _, c := range r.ToolCalls {
		offered := false
		for _, tool := range t.Tools {
			offered = offered || tool.Name == c.Name
		}
		switch {
		case !offered:
			return badCalls(model, fmt.Errorf("the model called %q, which is not among the tools offered", c.Name))
		case t.ToolChoice.Mode == provider.ToolNamed && c.Name != t.ToolChoice.Name:
			return badCalls(model, fmt.Errorf("the model called %q although %q was required", c.Name, t.ToolChoice.Name))
		case !provider.IsJSONObject(c.Input):
			return badCalls(model, fmt.Errorf("the arguments of the model's call of %q are not a JSON object", c.Name))
		}
	}
	if t.ToolChoice.Sequential && len(r.ToolCalls) > 1 {
		return badCalls(model, fmt.Errorf("the model made %d tool calls although parallel calls were off", len(r.ToolCalls)))
	}
	return nil
}

// toolNames are the names of calls, in order.
func toolNames(calls []provider.ToolCall) []string {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Name
	}
	return names
}

func badCalls(model string, err error) error {
	return &provider.Error{Kind: provider.KindUnknown, Model: model, Code: "invalid_tool_call", Err: err}
}
