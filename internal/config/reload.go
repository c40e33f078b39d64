package config

import (
	"encoding"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/fmgate/fmgate/internal/fallback"
)

// reloadable are the fields a running gateway applies when its config file
// is reloaded (SIGHUP, POST /admin/reload), as path patterns: "*" stands
// for one segment, "[*]" for any index, and a pattern covers every field
// below it. Every other field needs a restart, and a reload that changes
// one is refused whole. Each entry must take effect: the gateway reads it
// from the config snapshot a turn starts with, or the policy that owns it
// takes its new value while keeping its state.
var reloadable = []string{
	"server.maxMessageBytes",
	// The prompt is versioned by the artifact ledger, which re-reads it.
	"prompt.name", "prompt.system", "prompt.file",
	// The model tiers: a tier whose connection changed gets a new
	// provider (SameConnection); the others keep theirs.
	"models", "models[*]",
	// The simulator takes the settings of the simulated tiers a reload
	// adds or changes.
	"sim.models",
	"embeddings[*].aliases", "embeddings[*].inputPerMTok", "embeddings[*].dimensions", "embeddings[*].allowedDimensions",
	"embeddings[*].maxInputTokens", "embeddings[*].quota",
	"deadline",
	"auth.keys",
	"unitCosts",
	"rateLimit.global", "rateLimit.routes", "rateLimit.user", "rateLimit.premiumMultiplier", "rateLimit.outageProbe",
	"budget.requestInput", "budget.requestOutput", "budget.contextWindow", "budget.promptOverhead",
	"budget.safetyTokens", "budget.sessionInput", "budget.sessionOutput", "budget.dailyCostUsd",
	"budget.monthlyCostUsd", "budget.teams", "budget.features",
	"guardrails.email", "guardrails.phone", "guardrails.card", "guardrails.myNumber", "guardrails.postalCode",
	"guardrails.denyTerms", "guardrails.denyAction", "guardrails.answers", "guardrails.maxNonText", "guardrails.nonTextAction",
	// The remote check's client is built at start; its policy is read per turn.
	"guardrails.bedrock.timeout", "guardrails.bedrock.onError", "guardrails.bedrock.pricePer1kTextUnits",
	// A profile's checks as the top level's; a profile added or removed
	// whole is reloadable unless it brings a remote check (CheckReload).
	"guardrails.profiles.*.email", "guardrails.profiles.*.phone", "guardrails.profiles.*.card",
	"guardrails.profiles.*.myNumber", "guardrails.profiles.*.postalCode", "guardrails.profiles.*.denyTerms",
	"guardrails.profiles.*.denyAction", "guardrails.profiles.*.answers", "guardrails.profiles.*.maxNonText",
	"guardrails.profiles.*.nonTextAction", "guardrails.profiles.*.bedrock.timeout",
	"guardrails.profiles.*.bedrock.onError", "guardrails.profiles.*.bedrock.pricePer1kTextUnits",
	"guardrails.features", "guardrails.routes",
	"budget.timezone", "budget.storeTimeout",
	"quota.safetyMargin", "quota.models", "quota.pauseAt", "quota.guaranteed",
	"retry.strategy", "retry.base", "retry.cap", "retry.multiplier", "retry.maxRetries", "retry.classes",
	"retry.minAttemptTime",
	// Which turns are logged is decided per turn; the store, its key and
	// its writer are opened at start.
	"payloadLog.features", "payloadLog.sampleRate", "payloadLog.captureContent", "payloadLog.retention",
}

// perTurn are the fields of a model tier a turn reads from its config
// snapshot: a change to them alone keeps the tier's provider.
var perTurn = []string{
	"aliases", "inputPerMTok", "outputPerMTok", "cachedInputPerMTok", "cacheWritePerMTok", "cacheWrite1hPerMTok",
	"contextWindow", "maxOutputTokens", "confidence", "upstream", "promptCaching", "capabilities",
}

// SameConnection reports whether model tiers a and b differ only in what a
// turn reads from its config (prices, bounds, aliases, capabilities…), so
// that b may keep the provider built from a; a change to its name,
// provider, endpoint, region, model id, credentials, certificates or
// deployments needs a new one.
func SameConnection(a, b Model) bool {
	var changed []string
	diffValue("", reflect.ValueOf(a), reflect.ValueOf(b), &changed)
	for _, p := range changed {
		if !slices.Contains(perTurn, strings.SplitN(p, ".", 2)[0]) && !slices.Contains(perTurn, strings.SplitN(p, "[", 2)[0]) {
			return false
		}
	}
	return true
}

// Reloadable reports whether a running gateway applies a change to the
// field at path (as Diff names it) without a restart.
func Reloadable(path string) bool {
	segs := strings.Split(indexRE.ReplaceAllString(path, "[*]"), ".")
	for _, p := range reloadable {
		if covers(strings.Split(p, "."), segs) {
			return true
		}
	}
	return false
}

var indexRE = regexp.MustCompile(`\[\d+\]`)

func covers(pattern, path []string) bool {
	if len(path) < len(pattern) {
		return false
	}
	for i, p := range pattern {
		if p != "*" && p != path[i] {
			return false
		}
	}
	return true
}

// RestartError refuses a reload that changes fields only a restart
// applies; nothing of it was applied.
type RestartError struct {
	// Fields are the changed paths that need a restart.
	Fields []string
}

func (e *RestartError) Error() string {
	return "config: " + strings.Join(e.Fields, ", ") + ": needs a restart (the reload was refused; the config in force is unchanged)"
}

// CheckReload compares the config in force with next (valid already): it
// returns the changed paths, and a *RestartError naming every one of them
// a running gateway cannot apply.
func CheckReload(current, next Config) ([]string, error) {
	changed := Diff(current, next)
	var restart []string
	for _, p := range changed {
		switch {
		case Reloadable(p):
		case newLocalProfile(current, next, p):
		case strings.HasPrefix(p, "fallback.tiers") && slices.Equal(contentTiers(current), contentTiers(next)):
			// The model tiers listed there follow models (Validate).
		default:
			restart = append(restart, p)
		}
	}
	// With server.allowedHosts empty, whether auth.keys holds any key
	// decides the hosts allowed, and the host guard is built at start.
	if !slices.Equal(current.HostPatterns(), next.HostPatterns()) && !slices.Contains(restart, "server.allowedHosts") {
		restart = append(restart, "auth.keys (adding the first key or removing the last changes the hosts allowed while server.allowedHosts is empty)")
	}
	if len(restart) > 0 {
		return changed, &RestartError{Fields: restart}
	}
	return changed, nil
}

// newLocalProfile reports whether path is a guardrails profile added or
// removed whole that has no remote check: its checks are read per turn,
// while a remote check's client is built at start.
func newLocalProfile(current, next Config, path string) bool {
	name, ok := strings.CutPrefix(path, "guardrails.profiles.")
	if !ok || strings.Contains(name, ".") {
		return false
	}
	a, inA := current.Guardrails.Profiles[name]
	b, inB := next.Guardrails.Profiles[name]
	return inA != inB && !a.Bedrock.Enabled() && !b.Bedrock.Enabled()
}

// contentTiers are the tiers of c's fallback cascade below the models
// (cache, faq, graceful), with their confidences.
func contentTiers(c Config) []fallback.Tier {
	model := c.Fallback.ModelTiers()
	return slices.DeleteFunc(slices.Clone(c.Fallback.Tiers), func(t fallback.Tier) bool { return slices.Contains(model, t) })
}

// Diff lists the paths of the fields whose values differ between a and b,
// in the config file's names and order ("rateLimit.user.perMinute.rate",
// "models[0].inputPerMTok"); map entries come in key order, and an
// auth.keys key is redacted. A list of other lengths, or of plain values,
// is one path.
func Diff(a, b Config) []string {
	var out []string
	diffValue("", reflect.ValueOf(a), reflect.ValueOf(b), &out)
	return slices.Compact(out)
}

func diffValue(path string, a, b reflect.Value, out *[]string) {
	switch a.Kind() {
	case reflect.Struct:
		t := a.Type()
		exported := false
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			exported = true
			name, inline := yamlName(f)
			if name == "-" {
				continue
			}
			p := joinPath(path, name)
			if inline {
				p = path
			}
			diffValue(p, a.Field(i), b.Field(i), out)
		}
		if !exported && !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
	case reflect.Map:
		type entry struct {
			name string
			key  reflect.Value
		}
		var keys []entry
		seen := map[string]bool{}
		for _, m := range []reflect.Value{a, b} {
			for _, k := range m.MapKeys() {
				name := keyName(path, k)
				if !seen[name] {
					seen[name] = true
					keys = append(keys, entry{name, k})
				}
			}
		}
		slices.SortFunc(keys, func(x, y entry) int { return strings.Compare(x.name, y.name) })
		for _, k := range keys {
			av, bv := a.MapIndex(k.key), b.MapIndex(k.key)
			p := joinPath(path, k.name)
			if !av.IsValid() || !bv.IsValid() {
				*out = append(*out, p)
				continue
			}
			diffValue(p, av, bv, out)
		}
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() || a.Type().Elem().Kind() != reflect.Struct {
			if !reflect.DeepEqual(a.Interface(), b.Interface()) {
				*out = append(*out, path)
			}
			return
		}
		for i := range a.Len() {
			diffValue(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i), out)
		}
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				*out = append(*out, path)
			}
			return
		}
		diffValue(path, a.Elem(), b.Elem(), out)
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
	}
}

// yamlName is the field's name in the file, and whether it is inlined.
func yamlName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("yaml")
	name, opts, _ := strings.Cut(tag, ",")
	if strings.Contains(","+opts+",", ",inline,") {
		return "", true
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, false
}

// keyName is how a map key appears in a path: its text form, redacted
// for auth.keys, whose keys are credentials.
func keyName(path string, k reflect.Value) string {
	var s string
	if tm, ok := k.Interface().(encoding.TextMarshaler); ok {
		if b, err := tm.MarshalText(); err == nil {
			s = string(b)
		}
	}
	if s == "" {
		s = fmt.Sprint(k.Interface())
	}
	if path == "auth.keys" {
		return redactKey(s)
	}
	return s
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
