package api

import (
	"slices"
	"testing"

	"github.com/checkpointd/checkpointd/metrics"
)

// TestProblemCodesAreMetricLabels: every code the API answers with is a
// label value the metrics know, so no outcome is lumped into "other".
func TestProblemCodesAreMetricLabels(t *testing.T) {
	known := metrics.ProblemCodes()
	for _, e := range errorStatus {
		if !slices.Contains(known, e.code) {
			t.Errorf("problem code %q is not in metrics.ProblemCodes", e.code)
		}
	}
	if !slices.Contains(known, outcome(nil)) || !slices.Contains(known, problemFor(errPanic).Code) {
		t.Error("ok or internal missing from metrics.ProblemCodes")
	}
}
