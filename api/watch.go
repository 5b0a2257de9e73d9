package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/store"
)

// Watch defaults (docs/watch.md).
const (
	// DefaultWatchKeepAlive is how often an idle stream gets a comment, so
	// proxies keep it open (15 s).
	DefaultWatchKeepAlive = 15 * time.Second
	// DefaultWatchBacklog is how far back a Last-Event-ID may reach: past
	// it, the client gets a reset and the current state.
	DefaultWatchBacklog = 24 * time.Hour
	// DefaultWatchBuffer is how many changes may wait for one client; one
	// more drops it.
	DefaultWatchBuffer = 1024
	// DefaultWatchBufferBytes bounds the same queue by size: a few large
	// changes fill it as surely as many small ones.
	DefaultWatchBufferBytes = 1 << 20
	// DefaultWatchMemory bounds every stream's queue together; past it the
	// stream holding most is dropped (memory_budget).
	DefaultWatchMemory = 64 << 20
	// DefaultWatchStreams and DefaultWatchStreamsPerToken cap the open
	// streams of a replica and of one token; past either, 429.
	DefaultWatchStreams         = 4096
	DefaultWatchStreamsPerToken = 256
	// watchRetryAfter is the Retry-After of a stream refused past a cap.
	watchRetryAfter = "5"
	// DefaultWatchWriteTimeout bounds one write to a client: a client that
	// stops reading is dropped after it, without holding anything else.
	DefaultWatchWriteTimeout = 10 * time.Second
	// watchReauth is how often an open stream authenticates its token
	// again (a revoked token stops working within 1 s).
	watchReauth = time.Second
	// maxWatchBacklogEvents bounds a resume by count too: a client further
	// behind is reset rather than replayed.
	maxWatchBacklogEvents = 100_000
	// watchCoalesce is the least time between two sends of one stream
	// while changes keep coming.
	watchCoalesce = 10 * time.Millisecond
	// maxWatchState bounds the session events of a reset; past it the
	// client re-lists with GET /v1/sessions.
	maxWatchState = 500
)

// initWatch applies the watch defaults and makes the hub.
func (a *api) initWatch() {
	a.watchStop, a.watchKeepAlive, a.watchBacklog = a.WatchStop, a.WatchKeepAlive, a.WatchBacklog
	a.watchBuffer, a.watchWriteTimeout = a.WatchBuffer, a.WatchWriteTimeout
	if a.watchKeepAlive <= 0 {
		a.watchKeepAlive = DefaultWatchKeepAlive
	}
	switch {
	case a.watchBacklog == 0:
		a.watchBacklog = DefaultWatchBacklog
	case a.watchBacklog < 0:
		a.watchBacklog = 0 // no bound but retention
	}
	if a.watchBuffer <= 0 {
		a.watchBuffer = DefaultWatchBuffer
	}
	if a.watchWriteTimeout <= 0 {
		a.watchWriteTimeout = DefaultWatchWriteTimeout
	}
	l := watchLimits{queueEvents: a.watchBuffer, queueBytes: DefaultWatchBufferBytes, memory: a.WatchMemory,
		streams: a.WatchStreams, streamsByToken: a.WatchStreamsPerToken}
	if l.memory <= 0 {
		l.memory = DefaultWatchMemory
	}
	l.queueBytes = min(l.queueBytes, l.memory)
	if l.streams <= 0 {
		l.streams = DefaultWatchStreams
	}
	if l.streamsByToken <= 0 {
		l.streamsByToken = DefaultWatchStreamsPerToken
	}
	a.hub = &feedHub{st: a.Store.Feed, log: a.log, metrics: a.Metrics, limits: l}
}

// watchFilter is what one stream wants.
type watchFilter struct {
	who     *checkpointd.Principal
	session string
	repo    string // owner/name or owner/*; "" for all
}

// match reports whether the stream gets e: drains go to every stream,
// once; a session's changes to the streams whose token and filters cover
// it.
func (f *watchFilter) match(e store.FeedEvent) bool {
	if e.DrainID != "" {
		return true
	}
	if !f.who.InScope(e.Repo) {
		return false
	}
	if f.session != "" && e.SessionID != f.session {
		return false
	}
	return f.repo == "" || repoMatches(f.repo, e.Repo)
}

// repoMatches applies a repo filter (owner/name or owner/*) as a scope.
func repoMatches(filter, repo string) bool {
	return checkpointd.Principal{Role: checkpointd.RoleReader, Scope: []string{filter}}.InScope(repo)
}

// parseWatch validates the query and Last-Event-ID before the stream
// starts: a bad one is a 422 problem, a session out of scope 403, an
// unknown one 404.
func (a *api) parseWatch(r *http.Request) (*watchFilter, error) {
	q := r.URL.Query()
	f := &watchFilter{who: principal(r), session: q.Get("session"), repo: q.Get("repo")}
	var ps []checkpointd.Problem
	if q.Has("session") && !checkpointd.ValidID(f.session) {
		ps = append(ps, checkpointd.Problem{Path: "session", Message: "must be a session id"})
	}
	if q.Has("repo") && !checkpointd.ValidScope(f.repo) {
		ps = append(ps, checkpointd.Problem{Path: "repo", Message: "must be owner/name or owner/*"})
	}
	if ps != nil {
		return nil, &checkpointd.ValidationError{Kind: checkpointd.ErrInvalidRequest, Problems: ps}
	}
	if f.session != "" {
		repo, err := a.Store.Sessions.SessionRepo(r.Context(), f.session)
		if err != nil {
			return nil, err
		}
		if err := inScope(r, repo); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// watch serves GET /v1/watch: the change feed as Server-Sent Events
// (docs/watch.md).
func (a *api) watch(w http.ResponseWriter, r *http.Request) error {
	f, err := a.parseWatch(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	var from store.FeedPos
	resetReason := ""
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from, err = a.Store.Feed.ParseFeedPos(ctx, id, a.watchBacklog)
		var re *store.FeedResetError
		switch {
		case errors.As(err, &re):
			resetReason = re.Reason
		case err != nil:
			return err
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return nil
	}
	wt := newWatcher(f.match, f.who.TokenID, f.session)
	head, err := a.hub.join(ctx, wt)
	if err != nil {
		h.Del("Content-Type") // the problem's own
		return err
	}
	defer a.hub.leave(wt)
	// A dropped client is counted once, however its stream ends: a write
	// that fails on its dead connection also cancels the request.
	counted := false
	s := newSSE(w, a.watchWriteTimeout)
	boundSendBuffer(r)
	wt.setOnDrop(s.abort)
	defer func() {
		if counted {
			return
		}
		select {
		case <-wt.dropped:
			a.Metrics.WatchDropped(wt.reason)
		default:
			if s.timedOut {
				a.Metrics.WatchDropped(metrics.WatchWriteTimeout)
			}
		}
	}()
	w.WriteHeader(http.StatusOK)
	if err := s.comment("watching"); err != nil {
		return nil
	}
	if !from.IsZero() {
		reason, err := a.sendBacklog(ctx, s, f, from, head)
		if err != nil {
			return a.endStream(s, err)
		}
		resetReason = reason
	}
	if resetReason != "" {
		if err := a.sendState(ctx, s, f, resetReason, head); err != nil {
			return a.endStream(s, err)
		}
	}
	// A client resuming from another replica's id may be ahead of this
	// replica's reader: what the reader hands on next it partly has.
	seen := func(store.FeedEvent) bool { return false }
	if !from.IsZero() && resetReason == "" {
		seen = from.Covers()
	}
	keep := time.NewTicker(a.watchKeepAlive)
	defer keep.Stop()
	// The token is authenticated again every second while the stream lasts:
	// a revoked token stops receiving within the bound set for
	// every request, and a store that cannot say ends the stream (fail
	// closed; the client reconnects and authenticates).
	reauth := time.NewTicker(watchReauth)
	defer reauth.Stop()
	hash, _ := ctx.Value(tokenHashKey{}).(string)
	// A stream sends a change at once when it has been quiet, and at most
	// once per watchCoalesce under load, with everything queued meanwhile:
	// a busy feed then costs each stream one write per interval, not one
	// per change.
	var lastSend time.Time
	send := func() error {
		lastSend = time.Now()
		var frames [][]byte
		for _, it := range wt.take() {
			if !seen(it.event) {
				frames = append(frames, it.frame)
			}
		}
		// A drop between take and here sends nothing: what follows a gap
		// is never sent (and the drop ended the write anyway).
		if len(frames) == 0 || isClosed(wt.dropped) {
			return nil
		}
		return s.frames(frames)
	}
	coalesced := time.NewTimer(time.Hour)
	coalesced.Stop()
	defer coalesced.Stop()
	ready := wt.ready
	for {
		select {
		case <-ready:
			if wait := watchCoalesce - time.Since(lastSend); wait > 0 {
				ready = nil // the timer sends what comes meanwhile too
				coalesced.Reset(wait)
				continue
			}
			if err := send(); err != nil {
				return a.endStream(s, err)
			}
		case <-coalesced.C:
			ready = wt.ready
			if err := send(); err != nil {
				return a.endStream(s, err)
			}
		case <-keep.C:
			if err := s.comment("keep-alive"); err != nil {
				return a.endStream(s, err)
			}
		case <-wt.dropped:
			a.Metrics.WatchDropped(wt.reason)
			counted = true
			_ = s.event("", "error", map[string]any{"reason": wt.reason,
				"detail": "the client fell behind the change feed; reconnect with Last-Event-ID"})
			return nil
		case <-reauth.C:
			if _, err := a.Store.Auth.Authenticate(ctx, hash); err != nil {
				reason := "unauthorized"
				if errors.Is(err, checkpointd.ErrStoreUnavailable) {
					reason = "store_unavailable"
				}
				_ = s.event("", "error", map[string]any{"reason": reason, "detail": "the token is no longer accepted; the stream ends"})
				return nil
			}
		case <-a.watchStop:
			_ = s.comment("shutting down")
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// endStream ends a stream whose write or read failed. The answer has
// started: the problem cannot be a status any more, so a store failure is
// an error event (and the log's), a failed write just the end.
func (a *api) endStream(s *sse, err error) error {
	if errors.As(err, new(*writeError)) {
		return nil // watch counts a client that stopped reading
	}
	a.log.Warn("watch stream ended", "err", safeText(err.Error()))
	_ = s.event("", "error", map[string]any{"reason": problemFor(err).Code, "detail": "reconnect with Last-Event-ID"})
	return nil
}

// sendBacklog sends what the client missed: the changes after from up to
// the hub's head, after which its buffer takes over. It answers a reset
// reason instead when the client is too far behind.
func (a *api) sendBacklog(ctx context.Context, s *sse, f *watchFilter, from, head store.FeedPos) (string, error) {
	n := 0
	for {
		evs, next, more, err := a.Store.Feed.ReadFeed(ctx, from, head, feedPage)
		if err != nil {
			return "", err
		}
		if n += len(evs); n > maxWatchBacklogEvents {
			return store.FeedResetTooOld, nil
		}
		for _, e := range evs {
			if !f.match(e) {
				continue
			}
			if err := s.event(e.Pos.String(), feedType(e), feedData(e)); err != nil {
				return "", err
			}
		}
		if !more {
			return "", nil
		}
		from = next
	}
}
