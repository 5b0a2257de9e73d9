package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/drain"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/store"
)

// DrainHeader is the response header that tells every API client a drain
// gates new sessions and runs.
const DrainHeader = "Checkpointd-Drain"

// Verifier re-checks sessions against the forge before the gate decides
// (drain.Verifier; reconcile implements it).
type Verifier = drain.Verifier

const (
	drainingValue   = "draining"
	drainReasonHint = "why the drain is started, e.g. the deploy it prepares"
)

var errDrainRunning = errors.New("a drain is already running")

type startDrainRequest struct {
	Reason string `json:"reason"`
}

type drainResponse struct {
	Drain *checkpointd.Drain `json:"drain"`
}

// startDrain starts a drain (operator): from now on new sessions and runs
// are refused and every session must write a fresh, complete, valid
// checkpoint before the drain can complete. 409 drain_running, with the
// running drain, when one runs already.
func (a *api) startDrain(w http.ResponseWriter, r *http.Request) error {
	var q startDrainRequest
	if err := decode(w, r, &q); err != nil {
		return err
	}
	q.Reason = strings.TrimSpace(q.Reason)
	switch {
	case q.Reason == "":
		return checkpointd.Invalid("/reason", "required: "+drainReasonHint)
	case len(q.Reason) > checkpointd.MaxReasonLength:
		return checkpointd.Invalid("/reason", fmt.Sprintf("at most %d bytes", checkpointd.MaxReasonLength))
	}
	if err := redactFields(&q.Reason); err != nil {
		return err
	}
	d, started, err := a.gate.Start(r.Context(), q.Reason, principal(r).TokenID)
	if err != nil {
		return err
	}
	a.Metrics.SetDrainState(metrics.DrainDraining)
	w.Header().Set(DrainHeader, drainingValue)
	if !started {
		return &ProblemError{Err: fmt.Errorf("%w: drain %s, started %s", errDrainRunning, d.ID, d.StartedAt.Format(time.RFC3339)),
			Extra: map[string]any{"drain": d}}
	}
	a.logAction(r, "drain start", slog.String("drain", d.ID), slog.String("reason", q.Reason))
	w.Header().Set("Location", "/v1/drain")
	return writeJSON(w, http.StatusCreated, drainResponse{Drain: d})
}

type drainStatusResponse struct {
	// Drain is the open drain, else the latest one, else null.
	Drain *checkpointd.Drain `json:"drain"`
	// Draining is true while new sessions and runs are refused.
	Draining bool                       `json:"draining"`
	Counts   *checkpointd.DrainCounts   `json:"counts"`
	Blocking []checkpointd.DrainBlocker `json:"blocking"`
	// NextCursor pages through the blocking list (by session id).
	NextCursor *string `json:"next_cursor"`
	// Evidence is what can vouch for live heads; Notice says in words when
	// nothing can (checkpointd.NoEvidenceNotice).
	Evidence checkpointd.EvidenceSources `json:"evidence"`
	Notice   string                      `json:"notice,omitempty"`
	// Replicas are the replicas a completion asks to confirm that they
	// keep no unrecorded failed write (while a drain is open).
	Replicas []checkpointd.Replica `json:"replicas"`
}

// getDrain answers the drain's state (reader): counts of active, ready and
// blocking sessions, and a page of the blocking ones with their reasons. A
// scoped token sees every count but only its repos' sessions.
func (a *api) getDrain(w http.ResponseWriter, r *http.Request) error {
	limit, c, err := page(r)
	if err != nil {
		return err
	}
	st, err := a.gate.Status(r.Context(), store.DrainQuery{Limit: limit, After: c.ID, Scope: principal(r).ScopeFilter()})
	if err != nil {
		return err
	}
	resp := drainStatusResponse{Drain: scopedDrain(r, st.Drain), Draining: st.Drain != nil && st.Drain.Gating, Counts: st.Counts,
		Blocking: a.withUnblock(st.Blocking), Evidence: a.Evidence, Replicas: st.Replicas}
	if resp.Replicas == nil {
		resp.Replicas = []checkpointd.Replica{}
	}
	if a.Evidence.None() {
		resp.Notice = checkpointd.NoEvidenceNotice
	}
	if len(st.Blocking) == limit {
		next := encodeCursor(cursor{ID: st.Blocking[len(st.Blocking)-1].SessionID})
		resp.NextCursor = &next
	}
	a.Metrics.SetDrain(st.Drain, st.Counts)
	if !resp.Draining {
		w.Header().Del(DrainHeader)
	}
	return writeJSON(w, http.StatusOK, resp)
}

// completeDrainRequest is the optional body of a completion.
type completeDrainRequest struct {
	// OverrideReplicas names replicas that did not confirm, to complete
	// past them: the operator vouches that they hold no failed write.
	OverrideReplicas []string `json:"override_replicas"`
}

// completeDrain asks the gate to complete the open drain (operator). First
// the sessions blocked only because they are unverified are handed to the
// Verifier (bounded in time; only while a drain runs, so a completion with
// no drain answers 404 without asking the forge), then every replica is
// asked to confirm it keeps no unrecorded failed write (bounded in time),
// then the store decides in one transaction.
// 200 with the completed drain when nothing blocks; 409 drain_blocked with
// the counts, the blocking list and the unconfirmed replicas otherwise;
// 503 when anything the decision needs cannot be read: it fails closed,
// the drain stays running.
func (a *api) completeDrain(w http.ResponseWriter, r *http.Request) error {
	limit, err := pageLimit(r)
	if err != nil {
		return err
	}
	var q completeDrainRequest
	body, err := readBody(w, r, checkpointd.MaxRequestBytes)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeBody(body, &q); err != nil {
			return err
		}
	}
	for i, id := range q.OverrideReplicas {
		if !strings.HasPrefix(id, checkpointd.PrefixReplica) || !checkpointd.ValidID(id) {
			return checkpointd.Invalid(fmt.Sprintf("/override_replicas/%d", i), "a replica id (rep_…), as a blocked completion names it")
		}
	}
	d, err := a.gate.Complete(r.Context(), store.DrainCompletion{By: principal(r).TokenID, Limit: limit, Override: q.OverrideReplicas})
	if err != nil {
		if !errors.Is(err, checkpointd.ErrNotFound) {
			a.Metrics.DrainDecision("failed") // fail closed: the drain stays running
		}
		return err
	}
	a.observeDecision(r.Context(), d)
	a.logAction(r, "drain complete", slog.String("drain", d.ID), slog.String("outcome", string(d.Decision.Outcome)))
	if d.Decision.Outcome != checkpointd.DrainOutcomeCompleted {
		a.writeProblem(w, r, &ProblemError{Err: fmt.Errorf("%w: %s", checkpointd.ErrDrainBlocked, blockedDetail(d.Decision)),
			Extra: a.blockedExtra(d)})
		// The blocking sessions' logs are told after the answer, in the
		// background.
		a.gate.NoteBlocked(r.Context(), d.ID)
		return nil
	}
	// The sessions' logs are told after the answer, in the background.
	a.gate.NoteCompleted(r.Context())
	return writeJSON(w, http.StatusOK, drainResponse{Drain: d})
}

// blockedDetail says in one line what blocks a decision.
func blockedDetail(dec *checkpointd.DrainDecision) string {
	c := dec.Counts
	msg := fmt.Sprintf("%d of %d active sessions block the drain", c.Blocking, c.Active)
	switch n := len(dec.Unconfirmed); {
	case n == 1:
		msg += "; " + dec.Unconfirmed[0].Detail
	case n > 1:
		msg += fmt.Sprintf("; %d replicas did not confirm that they keep no unrecorded failed checkpoint write (unconfirmed_replicas)", n)
	}
	return msg
}

// withUnblock adds to each blocking entry what unblocks it.
func (a *api) withUnblock(bs []checkpointd.DrainBlocker) []checkpointd.DrainBlocker {
	for i := range bs {
		u := checkpointd.HowToUnblock(bs[i], a.Evidence)
		bs[i].Unblock = &u
	}
	return bs
}

// blockedExtra is the body of a drain_blocked answer beyond the problem.
func (a *api) blockedExtra(d *checkpointd.Drain) map[string]any {
	c := d.Decision.Counts
	blocking := a.withUnblock(slices.Clone(d.Decision.Blocking))
	unconfirmed := d.Decision.Unconfirmed
	if unconfirmed == nil {
		unconfirmed = []checkpointd.UnconfirmedReplica{}
	}
	extra := map[string]any{"drain_id": d.ID, "counts": c, "blocking": blocking,
		"decided_at": d.Decision.At, "evidence": a.Evidence, "unconfirmed_replicas": unconfirmed}
	if a.Evidence.None() {
		extra["notice"] = checkpointd.NoEvidenceNotice
	}
	return extra
}

// observeDecision logs a decision and hands it to OnDrainDecision (the
// place for a metric).
func (a *api) observeDecision(ctx context.Context, d *checkpointd.Drain) {
	c := d.Decision.Counts
	a.log.InfoContext(ctx, "drain decision", slog.String("drain", d.ID), slog.String("outcome", string(d.Decision.Outcome)),
		slog.Int64("active", c.Active), slog.Int64("blocking", c.Blocking))
	a.Metrics.DrainDecision(string(d.Decision.Outcome))
	a.Metrics.SetDrain(d, &c)
	if a.OnDrainDecision != nil {
		a.OnDrainDecision(d.Decision.Outcome)
	}
}

// cancelDrain ends the open drain (operator): a running drain is
// cancelled, a completed one lifted; new sessions and runs are admitted
// again. 404 when no drain is open.
func (a *api) cancelDrain(w http.ResponseWriter, r *http.Request) error {
	d, err := a.gate.Cancel(r.Context(), principal(r).TokenID)
	if err == nil || errors.Is(err, checkpointd.ErrNotFound) {
		a.Metrics.SetDrain(nil, nil)
		w.Header().Del(DrainHeader)
	}
	if err != nil {
		return err
	}
	a.logAction(r, "drain cancel", slog.String("drain", d.ID))
	return writeJSON(w, http.StatusOK, drainResponse{Drain: d})
}

// drainHeader marks every response with Checkpointd-Drain: draining while a
// drain gates new sessions and runs. The header is advisory, so it may lag
// a drain started on another replica by the cache's TTL; refusals and
// decisions always read the store.
func (a *api) drainHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.gate.Gating(r.Context()) {
			w.Header().Set(DrainHeader, drainingValue)
		}
		next.ServeHTTP(w, r)
	})
}

// recordWriteFailure hands the gate a failed checkpoint write to
// sessionID that could block a drain: one the client could have made
// succeed (400, 413, 415, 422) or the daemon failed (5xx), never one
// refused for who asked (401, 403), for what no longer exists (404, 410)
// or for a superseded run (409).
func (a *api) recordWriteFailure(r *http.Request, sessionID string, raw []byte, cause error) {
	p := problemFor(cause)
	switch {
	case p.Status >= 500:
	case p.Status == http.StatusBadRequest, p.Status == http.StatusRequestEntityTooLarge,
		p.Status == http.StatusUnsupportedMediaType, p.Status == http.StatusUnprocessableEntity:
	default:
		return
	}
	// The run the document names, read leniently: a document too broken to
	// name one is recorded too, since it cannot be shown to be another run's.
	var named struct {
		RunID string `json:"run_id"`
	}
	_ = json.Unmarshal(raw, &named)
	if !checkpointd.ValidID(named.RunID) {
		named.RunID = ""
	}
	a.gate.WriteFailed(r.Context(), drain.WriteFailure{SessionID: sessionID, RunID: named.RunID, Code: p.Code, Detail: p.Detail,
		StoreFailed: errors.Is(cause, checkpointd.ErrStoreUnavailable), Principal: principal(r)})
}
