package ratelimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Policy is a limit as the IETF RateLimit header fields express it: Quota
// tokens per Window. For a token bucket that is the burst and the time an
// empty bucket takes to refill, so "remaining" never exceeds the quota.
type Policy struct {
	Quota  int
	Window time.Duration
}

func policyOf(l Limit) Policy {
	if !l.Enabled() {
		return Policy{}
	}
	b := l.burst()
	return Policy{Quota: b, Window: time.Duration(b) * l.interval()}
}

// String renders the policy as a RateLimit-Policy item, e.g. "30;w=60".
func (p Policy) String() string {
	return fmt.Sprintf("%d;w=%d", p.Quota, ceilSeconds(p.Window))
}

// Result is the admission decision for one turn.
type Result struct {
	// Allowed reports whether the turn was admitted (and tokens taken).
	Allowed bool
	// Limit names the refusing scope ("global", "route_sendMessage",
	// "user_per_second", "user_per_minute", "user_per_hour",
	// "user_per_day"); when admitted, the scope with the fewest tokens
	// left. "" when no scope applies.
	Limit string
	// Policy is that scope's limit, for RateLimit-Policy.
	Policy Policy
	// Remaining is the tokens left in that scope.
	Remaining int
	// RetryAfter is, when refused, how long until the turn would be admitted
	// (Never if its cost exceeds the scope's burst).
	RetryAfter time.Duration
	// Reset is when refused the same as RetryAfter, when admitted the time
	// until the scope's bucket is full again.
	Reset time.Duration
	// Degraded reports that Redis was unreachable and the outage policies
	// decided.
	Degraded bool
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up and at least
// 1 when refused (0 when admitted). A request that can never pass reports
// the scope's window.
func (r Result) RetryAfterSeconds() int {
	if r.Allowed {
		return 0
	}
	d := r.RetryAfter
	if d == Never {
		d = r.Policy.Window
	}
	return max(1, ceilSeconds(d))
}

// Headers returns RateLimit-Policy and RateLimit (IETF draft syntax) for the
// reported scope and, when refused, Retry-After.
func (r Result) Headers() http.Header {
	h := http.Header{}
	if r.Limit == "" {
		return h
	}
	h.Set("RateLimit-Policy", r.Policy.String())
	reset := ceilSeconds(r.Reset)
	if !r.Allowed {
		reset = r.RetryAfterSeconds()
	}
	h.Set("RateLimit", fmt.Sprintf("limit=%d, remaining=%d, reset=%d", r.Policy.Quota, r.Remaining, reset))
	if !r.Allowed {
		h.Set("Retry-After", strconv.Itoa(r.RetryAfterSeconds()))
	}
	return h
}

// Message is what to tell the user about a refusal, in Japanese for a "ja"
// locale and English otherwise: which limit was hit and when to retry. It is
// "" when the turn was admitted.
func (r Result) Message(locale string) string {
	if r.Allowed {
		return ""
	}
	ja := strings.HasPrefix(strings.ToLower(locale), "ja")
	wait := waitText(r.RetryAfterSeconds(), ja)
	switch r.Limit {
	case ScopeUserPerSecond, ScopeUserPerMinute:
		if ja {
			return fmt.Sprintf("メッセージの送信が速すぎます。%s待ってから、もう一度お試しください。", wait)
		}
		return fmt.Sprintf("You're sending messages too fast — please wait %s and try again.", wait)
	case ScopeUserPerHour:
		if ja {
			return fmt.Sprintf("1時間あたりのメッセージ上限（%d件）に達しました。%s後にもう一度お試しください。", r.Policy.Quota, wait)
		}
		return fmt.Sprintf("You've reached the limit of %d messages per hour — please try again in %s.", r.Policy.Quota, wait)
	case ScopeUserPerDay:
		if ja {
			return fmt.Sprintf("本日のメッセージ上限（%d件）に達しました。%s後にもう一度お試しください。", r.Policy.Quota, wait)
		}
		return fmt.Sprintf("You've reached today's limit of %d messages — please try again in %s.", r.Policy.Quota, wait)
	case ScopeKeyPerMonth:
		if ja {
			return fmt.Sprintf("このAPIキーの月間リクエスト上限（%d件）に達しました。%s後にもう一度お試しください。", r.Policy.Quota, wait)
		}
		return fmt.Sprintf("This API key has used its %d requests for the month — please try again in %s.", r.Policy.Quota, wait)
	case ScopeKeyPerMinute:
		if ja {
			return fmt.Sprintf("このAPIキーの1分あたりのリクエスト上限（%d件）に達しました。%s待ってから、もう一度お試しください。", r.Policy.Quota, wait)
		}
		return fmt.Sprintf("This API key is over its limit of %d requests per minute — please wait %s and try again.", r.Policy.Quota, wait)
	case ScopeIP:
		if ja {
			return fmt.Sprintf("お使いのネットワークからのリクエストが多すぎます。%s待ってから、もう一度お試しください。", wait)
		}
		return fmt.Sprintf("Too many requests from your network — please wait %s and try again.", wait)
	default:
		if ja {
			return fmt.Sprintf("ただいま大変混み合っています。%s後にもう一度お試しください。", wait)
		}
		return fmt.Sprintf("MangaAssist is very busy right now — please try again in %s.", wait)
	}
}

// waitText renders a wait in the largest unit that keeps it readable,
// rounding up so the user never retries too early.
func waitText(sec int, ja bool) string {
	switch {
	case sec < 120:
		if ja {
			return fmt.Sprintf("%d秒", sec)
		}
		return fmt.Sprintf("%d s", sec)
	case sec < 2*3600:
		m := (sec + 59) / 60
		if ja {
			return fmt.Sprintf("%d分", m)
		}
		return fmt.Sprintf("%d min", m)
	default:
		h := (sec + 3599) / 3600
		if ja {
			return fmt.Sprintf("%d時間", h)
		}
		return fmt.Sprintf("%d h", h)
	}
}

func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}
