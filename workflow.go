package checkpointd

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ErrInvalidWorkflow reports a workflow configuration (roles, stages) that
// cannot be used. It is a startup error, never an API answer.
var ErrInvalidWorkflow = errors.New("invalid workflow configuration")

// workflowNamePattern is the shape of a role or stage name. It is the same
// pattern as $defs/name in docs/schema/checkpoint.v1.json (a test keeps them
// equal), so every configured name can appear in a valid document.
var workflowNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// Workflow is the configured set of session roles and workflow stages.
// Roles and stages are configuration data: code checks membership here and
// never compares against a literal role or stage name.
type Workflow struct {
	Roles  []string
	Stages []string
}

// DefaultWorkflow returns the roles and stages the product ships with.
// It returns fresh slices, so callers may modify them.
func DefaultWorkflow() Workflow {
	return Workflow{
		Roles: []string{"author", "reviewer", "operator"},
		Stages: []string{
			"planned", "implementing", "testing", "review_requested", "reviewing",
			"addressing_review", "merging", "blocked", "done",
		},
	}
}

// HasRole reports whether role is configured.
func (w Workflow) HasRole(role string) bool { return slices.Contains(w.Roles, role) }

// HasStage reports whether stage is configured.
func (w Workflow) HasStage(stage string) bool { return slices.Contains(w.Stages, stage) }

// Validate checks that w has at least one role and one stage, that every
// name matches ^[a-z][a-z0-9_.-]{0,63}$ and that no name repeats within its
// list. It returns an error wrapping ErrInvalidWorkflow.
func (w Workflow) Validate() error {
	if err := validateNames("role", w.Roles); err != nil {
		return err
	}
	return validateNames("stage", w.Stages)
}

// ParseNameList splits a comma-separated flag value such as
// "author, reviewer" into names, trimming spaces around each. An empty list,
// an empty element, a malformed name or a duplicate is an error wrapping
// ErrInvalidWorkflow, so a typo in a flag stops the daemon at startup
// instead of rejecting every checkpoint later.
func ParseNameList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: empty list", ErrInvalidWorkflow)
	}
	parts := strings.Split(s, ",")
	names := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("%w: element %d of %q is empty", ErrInvalidWorkflow, i+1, s)
		}
		names = append(names, p)
	}
	if err := validateNames("name", names); err != nil {
		return nil, err
	}
	return names, nil
}

func validateNames(what string, names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("%w: no %ss configured", ErrInvalidWorkflow, what)
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if !workflowNamePattern.MatchString(n) {
			return fmt.Errorf("%w: %s %q must match %s", ErrInvalidWorkflow, what, n, workflowNamePattern)
		}
		if seen[n] {
			return fmt.Errorf("%w: %s %q is listed twice", ErrInvalidWorkflow, what, n)
		}
		seen[n] = true
	}
	return nil
}
