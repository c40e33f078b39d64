package config

import (
	"fmt"

	"github.com/fmgate/fmgate/internal/alerts"
	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/canary"
	"github.com/fmgate/fmgate/internal/catalog"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/fallback"
	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/judge"
	"github.com/fmgate/fmgate/internal/live"
	"github.com/fmgate/fmgate/internal/payloadlog"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/queue"
	"github.com/fmgate/fmgate/internal/quota"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/retry"
	"github.com/fmgate/fmgate/internal/stream"
)

// Policies holds the configuration of each pipeline policy, defined in the
// package that implements it.
type Policies struct {
	// RateLimit is step 3: global, per-route and per-user limits.
	RateLimit ratelimit.Config `yaml:"rateLimit"`
	// Guardrails is step 3¾: personal data (e-mail, phone, card numbers,
	// マイナンバー, postal codes) and denied terms in the user's message,
	// each blocked (the redirect answer), redacted (a typed placeholder
	// before any model or store sees it) or logged. Default: card numbers
	// and マイナンバー redacted.
	Guardrails guardrail.Policy `yaml:"guardrails"`
	// Budget is step 4: token and cost budgets.
	Budget budget.Config `yaml:"budget"`
	// Catalog is the retrieval step between budget and plan: the product
	// catalog searched for reference context.
	Catalog catalog.Config `yaml:"catalog"`
	// Quota is step 6: TPM/RPM ceilings per model and priority classes.
	Quota quota.Config `yaml:"quota"`
	// Queue holds turns waiting for quota.
	Queue queue.Config `yaml:"queue"`
	// Retry is step 7: backoff, retry budget and adaptive pressure.
	Retry retry.Config `yaml:"retry"`
	// Breakers by model or dependency name.
	Breakers map[string]breaker.Config `yaml:"breakers"`
	// Fallback is step 8: the cascade's tiers, response cache and FAQ.
	Fallback fallback.Config `yaml:"fallback"`
	// Stream is step 9: chunk aggregation, heartbeats and backpressure.
	Stream stream.Config `yaml:"stream"`
	// Sim configures the built-in model simulator per model.
	Sim sim.Config `yaml:"sim"`
	// Events is step 10's event stream: buffer, write-ahead log, sinks, privacy.
	Events events.Config `yaml:"events"`
	// EventStore is the store behind /admin/cost: the embedded SQLite file
	// (an empty path switches it off), or with driver postgres the
	// fleet-wide database that fmgate ingest fills from NATS.
	EventStore eventstore.Config `yaml:"eventStore"`
	// Live sizes the live figures of the dashboards (GET /admin/live).
	Live live.Config `yaml:"live"`
	// Alerts are rules over the live figures, notified to webhooks in the
	// Alertmanager format (GET /admin/alerts lists them).
	Alerts alerts.Config `yaml:"alerts"`
	// Canary routes a share of sessions to a candidate prompt version and
	// judges it against the one in force (GET|PUT /admin/canary).
	Canary canary.Config `yaml:"canary"`
	// Judge grades a sample of completed turns at priority P2 through the
	// same pipeline, filling eval_score for the quality dashboard.
	Judge judge.Config `yaml:"judge"`
	// PayloadLog keeps the request and answer of chosen turns (per API
	// key, per feature, a sampled share), after the guardrails'
	// redaction, sealed at rest, for the admin's turn view and offline
	// evaluation. Default: off.
	PayloadLog payloadlog.Config `yaml:"payloadLog"`
}

func defaultPolicies() Policies {
	return Policies{
		RateLimit:  ratelimit.DefaultConfig(),
		Budget:     budget.DefaultConfig(),
		Guardrails: guardrail.DefaultPolicy(),
		Catalog:    catalog.DefaultConfig(),
		Quota:      quota.DefaultConfig(),
		Queue:      queue.DefaultConfig(),
		Retry:      retry.DefaultConfig(),
		Breakers:   breaker.Defaults(),
		Fallback:   fallback.DefaultConfig(),
		Stream:     stream.DefaultConfig(),
		Sim:        sim.DefaultConfig(),
		// The embedded event store (behind /admin/cost and the dashboards)
		// and the write-ahead log of must-persist events live under var/.
		Events: func() events.Config {
			c := events.DefaultConfig()
			c.WAL.Dir = "var/wal"
			return c
		}(),
		EventStore: eventstore.DefaultConfig(),
		Live:       live.DefaultConfig(),
		Alerts:     alerts.DefaultConfig(),
		Canary:     canary.DefaultConfig(),
		Judge:      judge.DefaultConfig(),
		PayloadLog: payloadlog.DefaultConfig(),
	}
}

func (c Config) validatePolicies(v *validator) {
	p := c.Policies
	v.sub("rateLimit", p.RateLimit.Validate())
	v.sub("live", p.Live.Validate())
	v.sub("alerts", p.Alerts.Validate())
	v.sub("canary", p.Canary.Validate())
	v.sub("judge", p.Judge.Validate())
	v.sub("payloadLog", p.PayloadLog.Validate())
	if t := p.Judge.Tier; t != "" {
		if _, ok := c.Model(t); !ok {
			v.add("judge.tier", fmt.Sprintf("no model tier named %q", t))
		}
	}
	v.sub("budget", p.Budget.Validate())
	v.sub("guardrails", p.Guardrails.Validate())
	v.sub("catalog", p.Catalog.Validate())
	v.sub("quota", p.Quota.Validate())
	v.sub("queue", p.Queue.Validate())
	v.sub("retry", p.Retry.Validate())
	v.sub("breakers", breaker.ValidateAll(p.Breakers))
	v.sub("fallback", p.Fallback.Validate())
	v.sub("stream", p.Stream.Validate())
	v.sub("sim", p.Sim.Validate())
	v.sub("events", p.Events.Validate())
	if p.EventStore.Path != "" || p.EventStore.Driver == eventstore.DriverPostgres {
		v.sub("eventStore", p.EventStore.Validate())
	}
	if p.EventStore.Driver == eventstore.DriverPostgres && p.Events.Sinks.NATS.URL == "" {
		v.add("events.sinks.nats.url", "must be set with eventStore.driver postgres: spans reach PostgreSQL through NATS and fmgate ingest")
	}

	// The policies must know every model tier.
	tiers := p.Fallback.ModelTiers()
	for i, m := range c.Models {
		if i >= len(tiers) || tiers[i].Name != m.Name {
			v.add("fallback.tiers", fmt.Sprintf("model tiers must be the models in order (models[%d] is %q)", i, m.Name))
			break
		}
	}
	for i, m := range c.Models {
		if _, ok := p.Quota.Models[m.Name]; !ok {
			v.add(fmt.Sprintf("models[%d]", i), fmt.Sprintf("quota.models has no ceiling for %q", m.Name))
		}
		if m.Provider == "sim" {
			if _, ok := p.Sim.Models[m.Name]; !ok {
				v.add(fmt.Sprintf("models[%d]", i), fmt.Sprintf("sim.models has no settings for %q", m.Name))
			}
		}
	}
}

// SimConfig is the simulator's configuration for this config: sim.models,
// plus a model for every tier served by the simulator (Haiku's pace when
// sim.models has none for it; an embedding tier's latency,
// simEmbedLatencyMs), each reporting its tier's modelId. fmgate sim
// serves every tier, whatever its provider, so a config can point its
// Bedrock, Anthropic or OpenAI tiers at a simulator started from the same
// file.
func (c Config) SimConfig() sim.Config {
	out := sim.Config{Models: make(map[string]sim.Settings, len(c.Sim.Models)+len(c.Models))}
	for name, st := range c.Sim.Models {
		out.Models[name] = st
	}
	for _, m := range c.Models {
		st, ok := out.Models[m.Name]
		if !ok {
			st = sim.DefaultConfig().Models["haiku"]
		}
		// A simulated tier keeps the id its sim settings report; a vendor
		// tier pointed at the simulator is found by its own modelId.
		if st.ModelID == "" || m.Provider != "sim" {
			st.ModelID = m.ModelID
		}
		out.Models[m.Name] = st
		// Each deployment of a simulated tier is a model of its own, with
		// the tier's settings unless sim.models names it: so that one can
		// be throttled or taken down while its siblings answer.
		for _, d := range m.Deployments {
			name := m.Name + "@" + d.Name
			if _, ok := c.Sim.Models[name]; !ok {
				out.Models[name] = st
			}
		}
	}
	// An embedding tier answers at once unless sim.models slows it down.
	for _, e := range c.Embeddings {
		st, ok := out.Models[e.Name]
		if !ok {
			st = sim.Settings{LatencyMs: simEmbedLatencyMs}
		}
		if st.ModelID == "" || e.Provider != "sim" {
			st.ModelID = e.ModelID
		}
		out.Models[e.Name] = st
	}
	return out
}

// simEmbedLatencyMs is a simulated embedding tier's latency when sim.models
// sets none: about what a short input takes on Bedrock.
const simEmbedLatencyMs = 20
