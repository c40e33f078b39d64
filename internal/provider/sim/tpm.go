package sim

import "time"

// tpmWindow is the span over which a TPM ceiling counts tokens.
const tpmWindow = time.Minute

// tpmLedger records the tokens a model consumed over the last minute, to
// throttle like Bedrock's tokens-per-minute quota. Not safe for concurrent
// use: the Sim's mutex guards it.
type tpmLedger struct {
	entries []tpmEntry // in the order recorded
	total   int        // sum of entries' tokens
}

type tpmEntry struct {
	at     time.Time
	tokens int
}

// expire drops entries that have left the window at now.
func (l *tpmLedger) expire(now time.Time) {
	i := 0
	for i < len(l.entries) && !now.Before(l.entries[i].at.Add(tpmWindow)) {
		l.total -= l.entries[i].tokens
		i++
	}
	// Reslicing keeps this O(expired); append reallocates, dropping the
	// expired prefix, once capacity runs out.
	l.entries = l.entries[i:]
}

// used returns the tokens counted in the window ending at now.
func (l *tpmLedger) used(now time.Time) int {
	l.expire(now)
	return l.total
}

// admit decides whether a call needing tokens fits under ceiling at now. If
// not, it returns how long until enough recorded tokens expire for it to fit;
// a call larger than the ceiling itself can never fit and is told to wait a
// whole window.
func (l *tpmLedger) admit(now time.Time, tokens, ceiling int) (ok bool, retryAfter time.Duration) {
	used := l.used(now)
	if used+tokens <= ceiling {
		return true, 0
	}
	if tokens > ceiling {
		return false, tpmWindow
	}
	need := used + tokens - ceiling
	for _, e := range l.entries {
		need -= e.tokens
		if need <= 0 {
			return false, max(e.at.Add(tpmWindow).Sub(now), time.Millisecond)
		}
	}
	return false, tpmWindow // unreachable: the entries sum to used
}

// record counts tokens consumed at now. It also drops expired entries, so a
// model without a ceiling keeps at most a minute of history.
func (l *tpmLedger) record(now time.Time, tokens int) {
	l.expire(now)
	if tokens <= 0 {
		return
	}
	l.entries = append(l.entries, tpmEntry{at: now, tokens: tokens})
	l.total += tokens
}
