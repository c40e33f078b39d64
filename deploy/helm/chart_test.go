package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/fmgate/fmgate/internal/config"
)

const chartDir = "fmgate"

// profiles are the values files the documentation tells operators to
// install with ("" is the chart's own defaults).
var profiles = []string{"", "values-demo.yaml", "values-fleet.yaml"}

// rendered is one profile's output, every object decoded strictly.
type rendered struct {
	deployments     map[string]*appsv1.Deployment
	services        map[string]*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	pdbs            map[string]*policyv1.PodDisruptionBudget
	hpas            map[string]*autoscalingv2.HorizontalPodAutoscaler
	serviceMonitors map[string]*monitoringv1.ServiceMonitor
	rules           map[string]*monitoringv1.PrometheusRule
	accounts        map[string]*corev1.ServiceAccount
}

func profileValues(t *testing.T, profile string, extra map[string]any) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if profile != "" {
		v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, profile))
		if err != nil {
			t.Fatal(err)
		}
		vals = v
	}
	return chartutil.CoalesceTables(extra, vals)
}

func render(t *testing.T, vals map[string]any) (*rendered, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return renderChart(ch, vals)
}

func renderChart(ch *chart.Chart, vals map[string]any) (*rendered, error) {
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "gw", Namespace: "llm", IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, err
	}
	r := &rendered{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		serviceMonitors: map[string]*monitoringv1.ServiceMonitor{}, rules: map[string]*monitoringv1.PrometheusRule{},
		accounts: map[string]*corev1.ServiceAccount{},
	}
	for name, text := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range releaseutil.SplitManifests(text) {
			if err := r.add(doc); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return r, nil
}

// strict decodes one object, refusing fields its type does not have.
func strict(doc []byte, into any) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

func (r *rendered) add(doc string) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
		return err
	}
	if head.Kind == "" {
		return nil // a template that rendered to nothing
	}
	type kind struct{ apiVersion, kind string }
	decode := func(v any) error {
		if err := strict([]byte(doc), v); err != nil {
			return fmt.Errorf("%s %s: %w", head.Kind, head.Metadata.Name, err)
		}
		return nil
	}
	name := head.Metadata.Name
	var err error
	switch (kind{head.APIVersion, head.Kind}) {
	case kind{"apps/v1", "Deployment"}:
		v := new(appsv1.Deployment)
		err, r.deployments[name] = decode(v), v
	case kind{"v1", "Service"}:
		v := new(corev1.Service)
		err, r.services[name] = decode(v), v
	case kind{"v1", "ConfigMap"}:
		v := new(corev1.ConfigMap)
		err, r.configMaps[name] = decode(v), v
	case kind{"v1", "Secret"}:
		v := new(corev1.Secret)
		err, r.secrets[name] = decode(v), v
	case kind{"v1", "ServiceAccount"}:
		v := new(corev1.ServiceAccount)
		err, r.accounts[name] = decode(v), v
	case kind{"policy/v1", "PodDisruptionBudget"}:
		v := new(policyv1.PodDisruptionBudget)
		err, r.pdbs[name] = decode(v), v
	case kind{"autoscaling/v2", "HorizontalPodAutoscaler"}:
		v := new(autoscalingv2.HorizontalPodAutoscaler)
		err, r.hpas[name] = decode(v), v
	case kind{"monitoring.coreos.com/v1", "ServiceMonitor"}:
		v := new(monitoringv1.ServiceMonitor)
		err, r.serviceMonitors[name] = decode(v), v
	case kind{"monitoring.coreos.com/v1", "PrometheusRule"}:
		v := new(monitoringv1.PrometheusRule)
		err, r.rules[name] = decode(v), v
	default:
		return fmt.Errorf("%s %s %s: not a kind this test knows; add its API type", head.APIVersion, head.Kind, name)
	}
	return err
}

func TestLint(t *testing.T) {
	for _, p := range profiles {
		t.Run(p, func(t *testing.T) {
			l := lint.All(chartDir, profileValues(t, p, nil), "llm", false)
			for _, m := range l.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// A misspelled field in a template is found by the strict decoding.
func TestStrictDecodingRefusesAMisspelledField(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ch.Templates {
		if f.Name == "templates/gateway-deployment.yaml" {
			f.Data = bytes.Replace(f.Data, []byte("terminationGracePeriodSeconds:"), []byte("terminationGracePeriodSecond:"), 1)
		}
	}
	_, err = renderChart(ch, nil)
	if err == nil || !strings.Contains(err.Error(), "terminationGracePeriodSecond") {
		t.Fatalf("render with a misspelled field: err = %v, want it named", err)
	}
}

// Every profile renders, decodes strictly, and gives a gateway that
// Kubernetes can drain and that fmgate accepts the config of.
func TestProfiles(t *testing.T) {
	for _, p := range profiles {
		t.Run(p, func(t *testing.T) {
			r, err := render(t, profileValues(t, p, nil))
			if err != nil {
				t.Fatal(err)
			}
			gw := r.deployments["gw-fmgate"]
			if gw == nil {
				t.Fatalf("no gateway Deployment gw-fmgate among %v", slices.Sorted(maps.Keys(r.deployments)))
			}
			cm := r.configMaps["gw-fmgate"]
			if cm == nil {
				t.Fatal("no ConfigMap gw-fmgate")
			}
			cfg, err := config.Parse(strings.NewReader(cm.Data["fmgate.yaml"]))
			if err != nil {
				t.Fatalf("fmgate validate on the rendered config:\n%v\n%s", err, cm.Data["fmgate.yaml"])
			}
			checkGateway(t, gw, cfg, r)
			checkState(t, cfg)
			// The pod, not this test, has the environment: every variable
			// the config names must come from the Secret.
			checkSecretsInPod(t, gw, cfg)
		})
	}
}

func checkGateway(t *testing.T, d *appsv1.Deployment, cfg config.Config, r *rendered) {
	t.Helper()
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("gateway pod has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe = %+v, want GET %s on port http", name, p, path)
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz")
	if cfg.Server.Addr != fmt.Sprintf("0.0.0.0:%d", c.Ports[0].ContainerPort) {
		t.Errorf("server.addr %s, container port %d: the probes would miss the listener", cfg.Server.Addr, c.Ports[0].ContainerPort)
	}
	// Kubernetes kills the pod after the grace period: it must cover the
	// preStop pause and the whole drain, with time to close the listener.
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("gateway has no preStop sleep: the Service would still route to a draining pod")
	}
	pre := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	if grace < pre+cfg.Server.DrainTimeout+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + drain %v + 5s shutdown", grace, pre, cfg.Server.DrainTimeout)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources = %+v, want a CPU request and a memory limit", c.Resources)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("securityContext = %+v, want non-root and a read-only root", sc)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	for _, path := range []string{"/etc/fmgate", "/var/lib/fmgate"} {
		if mounts[path] == "" {
			t.Errorf("nothing mounted at %s (mounts %v)", path, mounts)
		}
	}
	if !slices.Equal(c.Args, []string{"-config", "/etc/fmgate/fmgate.yaml"}) {
		t.Errorf("gateway args = %q", c.Args)
	}
	for _, svc := range r.services {
		if svc.Spec.Selector["app.kubernetes.io/component"] == "gateway" {
			for k, v := range svc.Spec.Selector {
				if d.Spec.Template.Labels[k] != v {
					t.Errorf("Service %s selects %s=%s, the gateway pods are labelled %v", svc.Name, k, v, d.Spec.Template.Labels)
				}
			}
		}
	}
	for _, pdb := range r.pdbs {
		if want := len(pdb.Spec.Selector.MatchLabels); want == 0 {
			t.Errorf("PodDisruptionBudget %s selects every pod", pdb.Name)
		}
		for k, v := range pdb.Spec.Selector.MatchLabels {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("PodDisruptionBudget %s selects %s=%s, the gateway pods are labelled %v", pdb.Name, k, v, d.Spec.Template.Labels)
			}
		}
	}
	for _, h := range r.hpas {
		if h.Spec.ScaleTargetRef.Name != d.Name || h.Spec.ScaleTargetRef.Kind != "Deployment" {
			t.Errorf("HPA %s scales %+v, want the gateway Deployment %s", h.Name, h.Spec.ScaleTargetRef, d.Name)
		}
		if d.Spec.Replicas != nil {
			t.Errorf("Deployment sets replicas while HPA %s scales it: every upgrade would reset the count", h.Name)
		}
	}
}

// State lives in the data volume, never in the read-only root.
func checkState(t *testing.T, cfg config.Config) {
	t.Helper()
	if !strings.HasPrefix(cfg.Events.WAL.Dir, "/var/lib/fmgate/") {
		t.Errorf("events.wal.dir = %q, want under /var/lib/fmgate", cfg.Events.WAL.Dir)
	}
	if cfg.EventStore.Driver != "postgres" && !strings.HasPrefix(cfg.EventStore.Path, "/var/lib/fmgate/") {
		t.Errorf("eventStore.path = %q, want under /var/lib/fmgate", cfg.EventStore.Path)
	}
}

func checkSecretsInPod(t *testing.T, d *appsv1.Deployment, cfg config.Config) {
	t.Helper()
	fromSecret := map[string]bool{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && (e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional) {
			fromSecret[e.Name] = true
		}
	}
	for _, m := range cfg.Models {
		if m.APIKeyEnv != "" && !fromSecret[m.APIKeyEnv] {
			t.Errorf("model %s reads its key from $%s, which the pod does not get from a Secret", m.Name, m.APIKeyEnv)
		}
	}
}

func TestFleetProfile(t *testing.T) {
	r, err := render(t, profileValues(t, "values-fleet.yaml", nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(strings.NewReader(r.configMaps["gw-fmgate"].Data["fmgate.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Fleet.Redis == "" || cfg.Events.Sinks.NATS.URL == "" || cfg.EventStore.Driver != "postgres" {
		t.Errorf("fleet config: redis %q, nats %q, eventStore %q: want all three shared", cfg.Fleet.Redis, cfg.Events.Sinks.NATS.URL, cfg.EventStore.Driver)
	}
	if cfg.Fleet.Size < 3 {
		t.Errorf("fleet.size = %d, want the minimum replica count (3)", cfg.Fleet.Size)
	}
	// Behind the edge, with a trusted X-User-Id, the gateways are reached by
	// the edge's names and scraped by address, not by a loopback name.
	if hosts := cfg.HostPatterns(); len(hosts) > 0 && !slices.Contains(hosts, "*") {
		t.Errorf("fleet gateways serve only the hosts %q", hosts)
	}
	ing := r.deployments["gw-fmgate-ingest"]
	if ing == nil {
		t.Fatal("no ingester Deployment")
	}
	if c := ing.Spec.Template.Spec.Containers[0]; !slices.Equal(c.Command, []string{"/usr/local/bin/fmgate", "ingest"}) {
		t.Errorf("ingester command = %q", c.Command)
	}
	h := r.hpas["gw-fmgate"]
	if h == nil {
		t.Fatal("no HPA")
	}
	var kinds []string
	for _, m := range h.Spec.Metrics {
		switch {
		case m.Resource != nil:
			kinds = append(kinds, string(m.Resource.Name))
		case m.Pods != nil:
			kinds = append(kinds, m.Pods.Metric.Name)
		}
	}
	if !slices.Equal(kinds, []string{"cpu", "fmgate_quota_saturation_ratio"}) {
		t.Errorf("HPA scales on %v, want cpu and fmgate_quota_saturation_ratio", kinds)
	}
	if pdb := r.pdbs["gw-fmgate"]; pdb == nil || pdb.Spec.MinAvailable.IntValue() < 2 {
		t.Errorf("PDB = %+v, want at least 2 of 3 gateways kept", pdb)
	}
	sm := r.serviceMonitors["gw-fmgate"]
	if sm == nil || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Authorization == nil {
		t.Fatalf("ServiceMonitor = %+v, want one endpoint scraping with the admin token", sm)
	}
	if rule := r.rules["gw-fmgate"]; rule == nil {
		t.Fatal("no PrometheusRule")
	} else {
		checkRulesMatchDocs(t, rule)
	}
}

const docsRules = "../../docs/prometheus/fmgate-alerts.yml"

// The chart's rules are docs/prometheus's, byte for byte and as rendered.
func checkRulesMatchDocs(t *testing.T, rule *monitoringv1.PrometheusRule) {
	t.Helper()
	var docs monitoringv1.PrometheusRuleSpec
	b, err := os.ReadFile(docsRules)
	if err != nil {
		t.Fatal(err)
	}
	if err := strict(b, &docs); err != nil {
		t.Fatalf("%s as a PrometheusRule spec: %v", docsRules, err)
	}
	got, _ := json.Marshal(rule.Spec)
	want, _ := json.Marshal(docs)
	if !bytes.Equal(got, want) {
		t.Errorf("rendered PrometheusRule differs from %s:\n got %s\nwant %s", docsRules, got, want)
	}
}

func TestChartRulesAreTheDocsRules(t *testing.T) {
	chartCopy, err := os.ReadFile(filepath.Join(chartDir, "files", "fmgate-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile(docsRules)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chartCopy, docs) {
		t.Fatalf("deploy/helm/fmgate/files/fmgate-alerts.yml differs from %s: run cp %s deploy/helm/fmgate/files/", docsRules, strings.TrimPrefix(docsRules, "../../"))
	}
}

// Bearer keys are secrets: the chart refuses them in the ConfigMap.
func TestKeysInTheConfigMapAreRefused(t *testing.T) {
	vals := profileValues(t, "values-demo.yaml", map[string]any{
		"config": map[string]any{"auth": map[string]any{"keys": map[string]any{"sk-1": map[string]any{"userId": "u1"}}}},
	})
	_, err := render(t, vals)
	if err == nil || !strings.Contains(err.Error(), "auth.keys") {
		t.Fatalf("render with auth.keys in config: err = %v, want a refusal naming auth.keys", err)
	}
}
