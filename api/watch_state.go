package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// sendState sends a reset and the current state: one session event per
// active session the stream covers (at most maxWatchState, then a reset
// saying truncated). The last of them carries the head's id, so a client
// cut off meanwhile is reset again rather than resumed past what it lacks.
func (a *api) sendState(ctx context.Context, s *sse, f *watchFilter, reason string, head store.FeedPos) error {
	sessions, truncated, err := a.watchState(ctx, f)
	if err != nil {
		return err
	}
	last := len(sessions) == 0 && !truncated
	id := func(final bool) string {
		if final {
			return head.String()
		}
		return ""
	}
	if err := s.event(id(last), checkpointd.FeedReset, map[string]any{"reason": reason,
		"detail": "the current state follows: one session event per active session"}); err != nil {
		return err
	}
	for i, sess := range sessions {
		final := i == len(sessions)-1 && !truncated
		if err := s.event(id(final), checkpointd.FeedSession, map[string]any{"session_id": sess.ID, "repo": sess.Repo,
			"change": "current", "session": sess}); err != nil {
			return err
		}
	}
	if truncated {
		return s.event(head.String(), checkpointd.FeedReset, map[string]any{"reason": "truncated",
			"detail": fmt.Sprintf("more than %d active sessions: list them with GET /v1/sessions?state=active", maxWatchState)})
	}
	return nil
}

// watchState lists the active sessions a stream covers, newest first.
func (a *api) watchState(ctx context.Context, f *watchFilter) ([]checkpointd.Session, bool, error) {
	if err := a.settled(ctx); err != nil {
		return nil, false, err
	}
	if f.session != "" {
		sess, err := a.Store.Sessions.GetSession(ctx, f.session)
		if err != nil || sess.State != checkpointd.SessionActive {
			return nil, false, ignoreGone(err)
		}
		return []checkpointd.Session{*sess}, false, nil
	}
	var out []checkpointd.Session
	flt := store.SessionFilter{State: checkpointd.SessionActive, Scope: f.who.ScopeFilter(), Limit: 200}
	if f.repo != "" && !strings.HasSuffix(f.repo, "/*") {
		flt.Repo = f.repo
	}
	for {
		page, err := a.Store.Sessions.ListSessions(ctx, flt)
		if err != nil {
			return nil, false, err
		}
		for _, sess := range page {
			if f.repo == "" || repoMatches(f.repo, sess.Repo) {
				if len(out) == maxWatchState {
					return out, true, nil
				}
				out = append(out, sess)
			}
		}
		if len(page) < flt.Limit {
			return out, false, nil
		}
		flt.Before = page[len(page)-1].ID
	}
}

// ignoreGone: a session cleared since the stream began has no state.
func ignoreGone(err error) error {
	if errors.Is(err, checkpointd.ErrNotFound) || errors.Is(err, checkpointd.ErrGone) {
		return nil
	}
	return err
}
