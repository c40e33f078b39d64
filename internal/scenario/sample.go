package scenario

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sample is the fleet's state over one second, read from every instance's
// /metrics: counters as deltas summed over the instances (a restarted
// instance's counters start again from zero), gauges as the worst value.
type Sample struct {
	At time.Duration
	// Turns counts turns admitted (refusals of the callers' limits left out).
	Turns, Attempts, Retries, Throttles float64
	ProviderThrottles                   float64 // upstream calls that came back throttled
	// Breakers: 0 closed, 1 half open, 2 open, by breaker name.
	Breakers map[string]int
	// Saturation is the TPM saturation ratio by model.
	Saturation map[string]float64
	QueueDepth float64
	Up         int
}

type sampler struct {
	r       *runner
	last    map[int]map[string]float64
	samples []Sample
}

func (s *sampler) loop(ctx context.Context) {
	s.last = map[int]map[string]float64{}
	s.take(ctx) // the baseline: counts from before the run are not the run's
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.samples = append(s.samples, s.take(ctx))
	}
}

// counters summed from /metrics, by series prefix.
var counterNames = map[string]string{
	"fmgate_turns_total":          "turns",
	"fmgate_model_attempts_total": "attempts",
	"fmgate_retries_total":        "retries",
	"fmgate_throttles_total":      "throttles",
}

func (s *sampler) take(ctx context.Context) Sample {
	sm := Sample{At: s.r.since(), Breakers: map[string]int{}, Saturation: map[string]float64{}}
	for _, in := range s.r.fleet.instances {
		data, status, err := s.r.admin(ctx, in, http.MethodGet, "/metrics", "")
		if err != nil || status != http.StatusOK {
			continue
		}
		sm.Up++
		cur := map[string]float64{}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" || line[0] == '#' {
				continue
			}
			sp := strings.LastIndexByte(line, ' ')
			if sp < 0 {
				continue
			}
			series, v := line[:sp], line[sp+1:]
			val, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			name, labels := series, ""
			if i := strings.IndexByte(series, '{'); i >= 0 {
				name, labels = series[:i], series[i:]
			}
			if key, ok := counterNames[name]; ok {
				cur[key] += val
				if name == "fmgate_model_attempts_total" && strings.Contains(labels, `outcome="throttled"`) {
					cur["provider_throttles"] += val
				}
				continue
			}
			switch name {
			case "fmgate_errors_total":
				if refusal(label(labels, "code")) {
					cur["refused"] += val
				}
			case "fmgate_breaker_state":
				if val == 1 {
					b, st := label(labels, "breaker"), label(labels, "state")
					lvl := map[string]int{"closed": 0, "half_open": 1, "open": 2}[st]
					sm.Breakers[b] = max(sm.Breakers[b], lvl)
				}
			case "fmgate_quota_saturation_ratio":
				if label(labels, "kind") == "tpm" {
					m := label(labels, "model")
					sm.Saturation[m] = max(sm.Saturation[m], val)
				}
			case "fmgate_queue_depth":
				sm.QueueDepth = max(sm.QueueDepth, val)
			}
		}
		prev := s.last[in.id]
		delta := func(k string) float64 {
			d := cur[k] - prev[k]
			if d < 0 { // restarted: counting again from zero
				d = cur[k]
			}
			return d
		}
		// Turns refused at admission never reach a model.
		sm.Turns += max(0, delta("turns")-delta("refused"))
		sm.Attempts += delta("attempts")
		sm.Retries += delta("retries")
		sm.Throttles += delta("throttles")
		sm.ProviderThrottles += delta("provider_throttles")
		s.last[in.id] = cur
	}
	return sm
}

// label reads name="value" out of a {…} label set.
func label(labels, name string) string {
	i := strings.Index(labels, name+`="`)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(name)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}
