package webhook

import "errors"

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
