package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/alerts"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/quota"
)

// reloadWait bounds how long a reload waits for the one before it.
const reloadWait = 10 * time.Second

// Codes of a refused reload (ReloadError.Code).
const (
	codeInvalidConfig = "invalid_config"
	codeNeedsRestart  = "needs_restart"
	codeNoConfigFile  = "no_config_file"
	codeReloadBusy    = "reload_busy"
	codeReloadFailed  = "reload_failed"
)

// ReloadResult is what a reload put in force.
type ReloadResult struct {
	// Changed are the paths of the fields that changed (config.Diff).
	Changed []string `json:"changed"`
	// PromptVersion is the prompt in force after the reload; PromptChanged
	// says whether the reload switched it (an edited prompt file switches
	// it without any field changing).
	PromptVersion string `json:"promptVersion"`
	PromptChanged bool   `json:"promptChanged"`
}

// ReloadError is a refused reload: the config in force is unchanged.
type ReloadError struct {
	Status int    // the HTTP status of POST /admin/reload
	Code   string // invalid_config, needs_restart, no_config_file, reload_busy, reload_failed
	// Problems say what is wrong, each "field: problem".
	Problems []string
	Err      error
}

func (e *ReloadError) Error() string {
	return "config reload refused (" + e.Code + "): " + strings.Join(e.Problems, "; ")
}

func (e *ReloadError) Unwrap() error { return e.Err }

// configurer is a quota ledger that takes new ceilings while running.
type configurer interface {
	Configure(quota.Config) error
}

// Reload reads the config file again and, when it is valid and changes
// only what a running gateway applies (config.CheckReload), puts it in
// force: each policy takes its new limits and keeps its state, the turns
// that start from now on run under the new config, and those in flight
// finish under the one they started with. Otherwise nothing changes and
// the *ReloadError says why. Either way the outcome is logged, recorded as
// a config_reload span, and a refusal raises the ConfigReloadFailed alert
// until a reload succeeds. Reloads take turns; one waits for the one
// before it at most reloadWait. source names who asked, for the log.
func (s *Server) Reload(ctx context.Context, source string) (ReloadResult, error) {
	wctx, cancel := context.WithTimeout(ctx, reloadWait)
	defer cancel()
	select {
	case s.reloading <- struct{}{}:
	case <-wctx.Done():
		err := &ReloadError{Status: http.StatusServiceUnavailable, Code: codeReloadBusy,
			Problems: []string{"another reload is still running; try again"}, Err: wctx.Err()}
		s.log.Warn("config reload not started", "source", source, "err", err)
		return ReloadResult{}, err
	}
	defer func() { <-s.reloading }()
	res, err := s.reload()
	s.reportReload(ctx, source, res, err)
	return res, err
}

func (s *Server) reload() (ReloadResult, error) {
	if s.configPath == "" {
		return ReloadResult{}, &ReloadError{Status: http.StatusBadRequest, Code: codeNoConfigFile,
			Problems: []string{"fmgate was started without -config: there is no file to reload"}}
	}
	next, err := config.Load(s.configPath)
	if err == nil {
		if s.override != nil {
			s.override(&next)
		}
		err = next.CheckSecrets()
	}
	if err != nil {
		return ReloadResult{}, invalidConfig(err)
	}
	text, err := next.SystemPrompt()
	if err != nil {
		return ReloadResult{}, invalidConfig(err)
	}
	current := *s.config()
	changed, err := config.CheckReload(current, next)
	if re, ok := errors.AsType[*config.RestartError](err); ok {
		problems := make([]string, len(re.Fields))
		for i, f := range re.Fields {
			problems[i] = f + ": needs a restart"
		}
		return ReloadResult{}, &ReloadError{Status: http.StatusUnprocessableEntity, Code: codeNeedsRestart, Problems: problems, Err: err}
	}
	if err := s.keysKeepTheirProfiles(next); err != nil {
		return ReloadResult{}, invalidConfig(err)
	}
	oldTiers := s.tiers.Load()
	tiers, err := s.buildTiers(context.Background(), next, oldTiers)
	if err != nil {
		return ReloadResult{}, invalidConfig(err)
	}
	if err := s.apply(next, tiers); err != nil {
		// Each policy checks what config.Load checked already; should one
		// refuse all the same, the others go back to the config in force.
		if rerr := s.apply(current, oldTiers); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restoring the config in force: %w", rerr))
		}
		return ReloadResult{}, &ReloadError{Status: http.StatusInternalServerError, Code: codeReloadFailed,
			Problems: []string{err.Error()}, Err: err}
	}
	res := ReloadResult{Changed: changed}
	if res.Changed == nil {
		res.Changed = []string{}
	}
	s.Ledger.SetConfigHash(configHash(next))
	res.PromptChanged, err = s.Ledger.Use(next.Prompt.Name, text, next.Prompt.File)
	if err != nil {
		s.log.Warn("config reloaded, but its prompt was not: the prompt in force stays", "err", err)
	}
	_, res.PromptVersion = s.Ledger.Active()
	return res, nil
}

// keysKeepTheirProfiles refuses a config that removes a guardrails
// profile a run-time key still names: its turns would silently lose their
// checks. The key is to be moved to another profile first.
func (s *Server) keysKeepTheirProfiles(next config.Config) error {
	if s.keys == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	all, err := s.keys.List(ctx)
	if err != nil {
		return fmt.Errorf("the run-time keys could not be read to check their guardrails profiles: %w", err)
	}
	var problems []error
	now := time.Now()
	for _, k := range all {
		if k.Guardrails == "" || k.Status(now) != "active" {
			continue
		}
		if err := next.Guardrails.CheckProfile(k.Guardrails); err != nil {
			problems = append(problems, fmt.Errorf("guardrails.profiles: run-time key %s (%s) is checked under profile %q, which this config removes: "+
				"PATCH /admin/keys/%s with another guardrails profile first", k.ID, k.Name, k.Guardrails, k.ID))
		}
	}
	return errors.Join(problems...)
}

// apply gives each policy cfg's limits, then puts cfg and its model tiers
// in force for the next turns.
func (s *Server) apply(cfg config.Config, tiers *tierSet) error {
	rl := cfg.RateLimit
	rl.FleetSize = cfg.Fleet.Size // as at start (policies)
	if err := s.limiter.SetConfig(rl); err != nil {
		return fmt.Errorf("rateLimit: %w", err)
	}
	if err := s.enforcer.SetConfig(cfg.Budget); err != nil {
		return err
	}
	if c, ok := s.Quota.(configurer); ok {
		if err := c.Configure(cfg.QuotaLedger()); err != nil {
			return err
		}
	}
	if err := s.Retrier.SetConfig(cfg.Retry); err != nil {
		return err
	}
	s.simulate(*s.config(), cfg)
	if err := s.Gateway.SetTiers(cfg, tiers.providers); err != nil {
		return err
	}
	s.tiers.Store(tiers)
	s.observeTiers(cfg)
	return nil
}

// simulate gives the simulator the settings of the simulated tiers and
// deployments cfg adds, and of those whose settings it changes from prev
// (sim.models); the others keep theirs, including what PUT /admin/sim
// changed.
func (s *Server) simulate(prev, cfg config.Config) {
	before := prev.SimConfig().Models
	for name, st := range cfg.SimConfig().Models {
		added, err := s.Sim.AddModel(name, st)
		if err == nil && !added {
			if was, ok := before[name]; !ok || !reflect.DeepEqual(was, st) {
				err = s.Sim.SetSettings(name, st)
			}
		}
		if err != nil {
			s.log.Warn("the simulator keeps a model's settings", "model", name, "err", err)
		}
	}
}

// invalidConfig is the refusal of a file that does not load or validate.
func invalidConfig(err error) *ReloadError {
	problems := []string{err.Error()}
	if p, ok := errors.AsType[*config.Problems](err); ok {
		problems = p.List
	}
	return &ReloadError{Status: http.StatusUnprocessableEntity, Code: codeInvalidConfig, Problems: problems, Err: err}
}

// reportReload logs the outcome of a reload, records it as a span, and
// raises or clears the ConfigReloadFailed alert, evaluated at once so that
// GET /admin/alerts says so without waiting for the next round.
func (s *Server) reportReload(ctx context.Context, source string, res ReloadResult, err error) {
	ctx = context.WithoutCancel(ctx)
	_, span := s.tracer.Start(ctx, "config_reload", events.WithKind(events.KindInternal), events.WithMustPersist())
	span.SetAttribution(events.Attribution{Feature: "config_reload"})
	_, version := s.Ledger.Active()
	span.SetPromptVersion(version)
	re, refused := errors.AsType[*ReloadError](err)
	switch {
	case refused:
		span.SetStatus(events.StatusFailed)
		span.SetErrorCode(re.Code)
		s.log.Warn("config reload refused; the config in force is unchanged", "source", source, "path", s.configPath,
			"code", re.Code, "problems", re.Problems)
		if re.Code != codeNoConfigFile {
			s.reloadFailed.Store(&alerts.ReloadFailure{Path: s.configPath, Code: re.Code, Problems: re.Problems})
		}
	case err != nil: // not reached: reload returns a *ReloadError
		span.SetStatus(events.StatusFailed)
		s.log.Warn("config reload failed", "source", source, "err", err)
	default:
		span.SetErrorCode("reloaded")
		s.log.Info("config reloaded", "source", source, "path", s.configPath, "changed", res.Changed,
			"prompt", res.PromptVersion, "promptChanged", res.PromptChanged)
		s.reloadFailed.Store(nil)
	}
	span.End()
	if s.Alerts != nil && s.observe != nil {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		s.Alerts.Evaluate(s.observe(actx))
	}
}

// serveReload is POST /admin/reload: 200 with what changed, or the
// refusal's status with the problems, the config in force unchanged.
func (s *Server) serveReload(w http.ResponseWriter, r *http.Request) {
	res, err := s.Reload(r.Context(), "POST /admin/reload")
	if err != nil {
		re, ok := errors.AsType[*ReloadError](err)
		if !ok {
			re = &ReloadError{Status: http.StatusInternalServerError, Code: codeReloadFailed, Problems: []string{err.Error()}}
		}
		writeJSON(w, re.Status, map[string]any{"error": map[string]any{
			"code":     re.Code,
			"message":  "The config was not reloaded; the config in force is unchanged: " + strings.Join(re.Problems, "; "),
			"problems": re.Problems,
		}})
		return
	}
	writeJSON(w, http.StatusOK, res)
}
