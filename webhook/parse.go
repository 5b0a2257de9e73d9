package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/checkpointd/checkpointd"
)

// prPayloadTypes are the fine event types whose payload is a
// PullRequestPayload. pull_request_comment is left out on purpose: as a fine
// type it is a plain PR comment (an issue_comment payload, whose "edited"
// action would look like a PR edit), and as a coarse pre-1.16 event a review
// comment; neither moves a head.
var prPayloadTypes = map[string]bool{
	"pull_request":                 true,
	"pull_request_sync":            true,
	"pull_request_assign":          true,
	"pull_request_label":           true,
	"pull_request_milestone":       true,
	"pull_request_review_request":  true,
	"pull_request_review_approved": true,
	"pull_request_review_rejected": true,
	"pull_request_review_comment":  true,
	"pull_request_approved":        true, // coarse names sent by servers < 1.16
	"pull_request_rejected":        true,
}

// prActions are the actions that change a PR's head, base or open state.
// deleted is Gitea's (Forgejo sends nothing when a PR is deleted).
var prActions = map[string]bool{
	"opened": true, "reopened": true, "synchronized": true, "edited": true, "closed": true, "deleted": true,
}

// prEnds are the actions after which the PR is gone, whatever its state
// says: Gitea builds a deletion's payload from the PR as it was, so a
// deleted open PR still reads "state": "open".
var prEnds = map[string]bool{"closed": true, "deleted": true}

// Parse turns a verified delivery into an Event. Events that need no action
// (create, tag pushes and deletions, test deliveries with before == after,
// PR actions such as labeled or reviewed, a null pull_request, unknown
// events) give Ignored. A payload of a handled event that does not decode or
// fails validation gives an error wrapping ErrMalformed.
func Parse(d *Delivery) (Event, error) {
	switch {
	case d.Event == "push":
		return parsePush(d.Payload)
	case d.Event == "delete":
		return parseDelete(d.Payload)
	case d.Event == "create":
		return Ignored{Event: d.Event, Reason: reasonCreate}, nil
	case d.Event == "pull_request_comment":
		return Ignored{Event: d.Event, Reason: reasonComment}, nil
	case prPayloadTypes[d.Event]:
		return parsePullRequest(d.Event, d.Payload)
	}
	return Ignored{Event: d.Event, Reason: reasonUnhandled}, nil
}

// decode unmarshals leniently: unknown fields are ignored, since the forges
// add fields between versions.
func decode(event string, payload []byte, v any) error {
	if err := json.Unmarshal(payload, v); err != nil {
		return malformed(event, err)
	}
	return nil
}

func malformed(event string, err error) error {
	return fmt.Errorf("%w: %s payload: %v", ErrMalformed, event, err)
}

// repoPayload is the part of payload.repository the daemon uses.
type repoPayload struct {
	ID       int64  `json:"id"`
	FullName string `json:"full_name"`
}

func (r *repoPayload) validate() error {
	if r == nil {
		return errors.New("repository missing")
	}
	owner, name, ok := strings.Cut(r.FullName, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") ||
		strings.ContainsAny(r.FullName, " \t") || !validName(r.FullName) {
		return errors.New("repository.full_name is not owner/name")
	}
	if r.ID < 0 {
		return errors.New("repository.id is negative")
	}
	return nil
}

func (r *repoPayload) repo() Repo { return Repo{ID: r.ID, FullName: r.FullName} }

type pushPayload struct {
	Ref        string       `json:"ref"`
	Before     string       `json:"before"`
	After      string       `json:"after"`
	Repository *repoPayload `json:"repository"`
}

// validate checks the fields and lowercases the SHAs in place.
func (p *pushPayload) validate() error {
	if err := p.Repository.validate(); err != nil {
		return err
	}
	if !strings.HasPrefix(p.Ref, "refs/") || !validName(p.Ref) {
		return errors.New("ref is not a full ref")
	}
	var ok bool
	if p.Before, ok = normSHA(p.Before); !ok {
		return errors.New("before is not a SHA")
	}
	if p.After, ok = normSHA(p.After); !ok {
		return errors.New("after is not a SHA")
	}
	if len(p.Before) != len(p.After) {
		return errors.New("before and after differ in object format")
	}
	return nil
}

func parsePush(payload []byte) (Event, error) {
	var p pushPayload
	if err := decode("push", payload, &p); err != nil {
		return nil, err
	}
	if err := p.validate(); err != nil {
		return nil, malformed("push", err)
	}
	branch, ok := strings.CutPrefix(p.Ref, "refs/heads/")
	switch {
	case strings.HasPrefix(p.Ref, "refs/tags/"):
		return Ignored{Event: "push", Reason: reasonTagPush}, nil
	case !ok:
		return Ignored{Event: "push", Reason: reasonOtherRef}, nil
	case branch == "":
		return nil, malformed("push", errors.New("empty branch name"))
	case checkpointd.LooksLikeSecret(branch):
		// Sessions and leases cannot name such a branch (the API refuses
		// it), so nothing is lost by not keeping the forge's text of it.
		return Ignored{Event: "push", Reason: reasonSecretRef}, nil
	case p.Before == p.After:
		// Checked before the zero SHA: Gitea's UI test delivery sends
		// before == after == zeros, which is not a deletion.
		return Ignored{Event: "push", Reason: reasonTestDelivery}, nil
	case IsZeroSHA(p.After):
		return BranchDeleted{Repo: p.Repository.repo(), Branch: branch}, nil
	}
	return Push{Repo: p.Repository.repo(), Branch: branch, Before: p.Before, After: p.After}, nil
}

type deletePayload struct {
	Ref        string       `json:"ref"`
	RefType    string       `json:"ref_type"`
	Repository *repoPayload `json:"repository"`
}

func (p *deletePayload) validate() error {
	if err := p.Repository.validate(); err != nil {
		return err
	}
	if p.RefType == "" {
		return errors.New("ref_type missing")
	}
	if p.RefType == "branch" {
		// Gitea sends the short name; Forgejo's forgejo-type hooks the full ref.
		p.Ref = strings.TrimPrefix(p.Ref, "refs/heads/")
	}
	if !validName(p.Ref) {
		return errors.New("ref is empty or not printable")
	}
	return nil
}

func parseDelete(payload []byte) (Event, error) {
	var p deletePayload
	if err := decode("delete", payload, &p); err != nil {
		return nil, err
	}
	if err := p.validate(); err != nil {
		return nil, malformed("delete", err)
	}
	switch p.RefType {
	case "branch":
		if checkpointd.LooksLikeSecret(p.Ref) {
			return Ignored{Event: "delete", Reason: reasonSecretRef}, nil
		}
		return BranchDeleted{Repo: p.Repository.repo(), Branch: p.Ref}, nil
	case "tag":
		return Ignored{Event: "delete", Reason: reasonTagDelete}, nil
	}
	return Ignored{Event: "delete", Reason: reasonOtherRefType}, nil
}

type prBranch struct {
	Label string `json:"label"`
	Ref   string `json:"ref"`
	SHA   string `json:"sha"`
}

// prObject is the part of payload.pull_request the daemon uses. Its head and
// base are computed from live git when the payload is built.
type prObject struct {
	Number int64    `json:"number"`
	State  string   `json:"state"` // open or closed
	Merged bool     `json:"merged"`
	Head   prBranch `json:"head"`
	Base   prBranch `json:"base"`
}

type prPayload struct {
	Action      string       `json:"action"`
	Number      int64        `json:"number"`
	PullRequest *prObject    `json:"pull_request"`
	Repository  *repoPayload `json:"repository"`
}

// validate checks a payload whose action is handled and whose pull_request
// is not null, and lowercases the head SHA in place.
func (p *prPayload) validate() error {
	if err := p.Repository.validate(); err != nil {
		return err
	}
	if p.Number <= 0 {
		return errors.New("number is not positive")
	}
	pr := p.PullRequest
	if pr.Number != 0 && pr.Number != p.Number {
		return errors.New("pull_request.number differs from number")
	}
	var ok bool
	if pr.Head.SHA, ok = normSHA(pr.Head.SHA); !ok || IsZeroSHA(pr.Head.SHA) {
		return errors.New("pull_request.head.sha is not a SHA")
	}
	if !validName(pr.Head.Ref) {
		return errors.New("pull_request.head.ref is empty or not printable")
	}
	// The label is empty for AGit PRs, so only its characters are checked.
	if pr.Head.Label != "" && !validName(pr.Head.Label) {
		return errors.New("pull_request.head.label is not printable")
	}
	if !validName(pr.Base.Ref) {
		return errors.New("pull_request.base.ref is empty or not printable")
	}
	return nil
}

// skip is the reason to ignore a payload before validating it, or "": an
// action or a null pull_request the daemon does not act on is no reason to
// reject the delivery, whatever else the payload holds.
func (p *prPayload) skip() string {
	switch {
	case !prActions[p.Action]:
		return reasonAction
	case p.PullRequest == nil:
		return reasonNullPR
	}
	return ""
}

func parsePullRequest(event string, payload []byte) (Event, error) {
	var p prPayload
	if err := decode(event, payload, &p); err != nil {
		return nil, err
	}
	if reason := p.skip(); reason != "" {
		return Ignored{Event: event, Reason: reason}, nil
	}
	if err := p.validate(); err != nil {
		return nil, malformed(event, err)
	}
	pr := p.PullRequest
	return PullRequest{
		Repo:      p.Repository.repo(),
		Number:    p.Number,
		Action:    p.Action,
		HeadSHA:   pr.Head.SHA,
		HeadRef:   pr.Head.Ref,
		HeadLabel: pr.Head.Label,
		BaseRef:   pr.Base.Ref,
		// An edit of a PR that already closed still says so: it must not
		// read as the PR being open again.
		Closed: prEnds[p.Action] || pr.State == "closed",
		Merged: pr.Merged,
	}, nil
}
