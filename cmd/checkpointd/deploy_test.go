package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v4"

	"github.com/checkpointd/checkpointd/store/storetest"
)

const (
	alertRulesFile = "../../deploy/prometheus/checkpointd-alerts.yml"
	dashboardFile  = "../../deploy/grafana/checkpointd-dashboard.json"
)

// needTool finds a program a test drives. Without it the test skips,
// except under CHECKPOINTD_TEST_REQUIRE_TOOLS=1 (.ci/run installs them),
// where it fails.
func needTool(t *testing.T, name, why string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CHECKPOINTD_TEST_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s needs %s: %v", why, name, err)
		}
		t.Skipf("%s needs %s (%v): skipped", why, name, err)
	}
	return path
}

// TestAlertRulesAndDashboardNameExportedMetrics scrapes a live daemon and
// checks every checkpointd metric the alert rules and the dashboard name:
// the metric must be exported, and every label value a query matches on
// (label="v", or each word of label=~"a|b") must be one of its series at
// a daemon's first scrape — the counters start at zero for their known
// labels, so an alert works before the first event. It scrapes a daemon on
// each backend: the metrics of PostgreSQL's statistics (postgresOnly) are
// exported only there, and must be absent on SQLite.
func TestAlertRulesAndDashboardNameExportedMetrics(t *testing.T) {
	queries := ruleAndDashboardQueries(t)
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := startServe(t, nil, storeArgs(t.TempDir(), backendURL(t, b))...)
		_, text := scrapeText(t, d.URL+"/metrics")
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err := p.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		if bi := families["checkpointd_build_info"]; bi == nil || len(bi.Metric) != 1 || bi.Metric[0].GetGauge().GetValue() != 1 {
			t.Errorf("checkpointd_build_info: %v", bi)
		}
		for _, name := range postgresOnly {
			if _, ok := families[name]; ok != (b == storetest.Postgres) {
				t.Errorf("%s exported: %v, on %s", name, ok, b)
			}
		}
		named := 0
		for file, exprs := range queries {
			for _, expr := range exprs {
				for _, problem := range checkQuery(expr, families) {
					if b == storetest.SQLite && slices.ContainsFunc(postgresOnly, func(name string) bool { return problem == name+" is not exported" }) {
						continue
					}
					t.Errorf("%s: %s\n\tin %s", filepath.Base(file), problem, expr)
				}
				named += len(selectorRE.FindAllString(expr, -1))
			}
		}
		if named < 25 {
			t.Errorf("only %d metric selectors found in the rules and the dashboard", named)
		}
	})
}

// postgresOnly are the metrics a daemon on PostgreSQL exports and one on
// SQLite does not.
var postgresOnly = []string{"checkpointd_store_live_rows", "checkpointd_store_dead_rows"}

// ruleAndDashboardQueries reads every PromQL expression of the alert rules
// and the dashboard, by file.
func ruleAndDashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	queries := map[string][]string{} // file → expressions
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	raw, err := os.ReadFile(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", alertRulesFile, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			queries[alertRulesFile] = append(queries[alertRulesFile], r.Expr)
		}
	}
	raw, err = os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries[dashboardFile] = append(queries[dashboardFile], tg.Expr)
		}
	}
	if len(queries[alertRulesFile]) < 6 || len(queries[dashboardFile]) < 15 {
		t.Fatalf("read %d rules and %d dashboard queries: the files lost their content?", len(queries[alertRulesFile]), len(queries[dashboardFile]))
	}
	return queries
}

var (
	selectorRE = regexp.MustCompile(`\b(checkpointd_[a-z0-9_]+)(\{[^}]*\})?`)
	matcherRE  = regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	wordRE     = regexp.MustCompile(`^[a-z0-9_]+$`)
)

// checkQuery says what in one PromQL expression names a metric or a label
// value the scrape does not have.
func checkQuery(expr string, families map[string]*dto.MetricFamily) []string {
	var problems []string
	for _, m := range selectorRE.FindAllStringSubmatch(expr, -1) {
		name, matchers := m[1], m[2]
		fam := families[name]
		if fam == nil {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if f := families[strings.TrimSuffix(name, suffix)]; f != nil && strings.HasSuffix(name, suffix) && f.GetType() == dto.MetricType_HISTOGRAM {
					fam = f
				}
			}
		}
		if fam == nil {
			problems = append(problems, name+" is not exported")
			continue
		}
		for _, mm := range matcherRE.FindAllStringSubmatch(matchers, -1) {
			label, op, value := mm[1], mm[2], mm[3]
			if label == "job" || label == "instance" || label == "le" {
				continue // the scraper's labels, and the buckets'
			}
			var words []string
			switch op {
			case "=":
				words = []string{value}
			case "=~":
				words = strings.Split(value, "|")
			default:
				problems = append(problems, name+": a negative matcher on "+label+" cannot be checked; say the values")
				continue
			}
			for _, w := range words {
				if !wordRE.MatchString(w) {
					problems = append(problems, name+": "+label+" matches "+w+", not a plain value")
				} else if !hasSeries(fam, label, w) {
					problems = append(problems, name+" has no series with "+label+"="+w)
				}
			}
		}
	}
	return problems
}

func hasSeries(fam *dto.MetricFamily, label, value string) bool {
	return slices.ContainsFunc(fam.Metric, func(m *dto.Metric) bool {
		return slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value })
	})
}

// TestAlertRulesPassPromtool: `promtool check rules` accepts the rules
// (Debian's prometheus package; .ci/run installs it).
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool := needTool(t, "promtool", "checking the alert rules")
	out, err := exec.Command(promtool, "check", "rules", alertRulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool check rules said:\n%s", out)
	}
}
