package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store"
)

// checkpointStore is what the checkpoint handlers need of persistence.
type checkpointStore interface {
	WriteCheckpoint(ctx context.Context, w store.CheckpointWrite) (*checkpointd.Checkpoint, error)
	GetCheckpoint(ctx context.Context, sessionID string, seq int64) (*checkpointd.Checkpoint, error)
	ListCheckpoints(ctx context.Context, sessionID string, before int64, limit int) ([]checkpointd.CheckpointSummary, error)
}

func (a *api) writeCheckpoint(w http.ResponseWriter, r *http.Request) (err error) {
	id := chi.URLParam(r, "id")
	if !checkpointd.ValidID(id) {
		return fmt.Errorf("no such session: %w", checkpointd.ErrNotFound)
	}
	caller := principal(r)
	// Checkpoint keys are scoped to the session, admitted only to a caller
	// whose token covers the session's repo. The session must exist (404)
	// and not be gone (410): a key of no session is never claimed.
	keys := keyScope{name: id, admit: func() error {
		repo, err := a.Store.Sessions.SessionRepo(r.Context(), id)
		if err != nil {
			return err
		}
		if !caller.InScope(repo) {
			return checkpointd.OutOfScope()
		}
		return nil
	}}
	var raw []byte
	start, committed, redactions := time.Now(), false, 0
	defer func() {
		a.Metrics.CheckpointWrite(outcome(err), committed, time.Since(start), redactions)
	}()
	defer func() {
		// A write that fails while a drain runs must block it (drain.go).
		if err != nil {
			a.recordWriteFailure(r, id, raw, err)
		}
	}()
	// A failure of this session kept while the store was away is recorded
	// before this write, which then clears it; if it cannot be, it stays
	// kept (writefail).
	_ = a.Failures.Record(r.Context(), id)
	raw, err = readBody(w, r, a.MaxDocumentBytes)
	if err != nil {
		return err
	}
	p, err := checkpointd.PrepareCheckpoint(raw, a.Workflow, a.DigestKey)
	if err != nil {
		return err
	}
	if err := redactedIdentifiers(p.Doc); err != nil {
		return err
	}
	// Checkpoint keys are scoped to the session; the digest is the
	// document's own, over its pre-redaction canonical form.
	return a.idempotent(w, r, keys, p.Digest,
		func(idem *store.Idempotency) (any, error) {
			noted := a.Failures.Mark() // what this write may supersede
			cp, err := a.Store.Checkpoints.WriteCheckpoint(r.Context(), store.CheckpointWrite{
				SessionID: id, Doc: p.Doc, Digest: p.Digest, Redactions: p.Redactions,
				InScope: caller.InScope, Idempotency: idem,
			})
			if err == nil {
				committed, redactions = true, cp.Redactions
				a.Failures.Superseded(id, noted) // as the write clears a recorded failure
			}
			return cp, err
		},
		func(res any) any {
			cp := res.(*checkpointd.Checkpoint)
			w.Header().Set("Location", fmt.Sprintf("/v1/sessions/%s/checkpoints/%d", id, cp.Seq))
			return map[string]any{"checkpoint": cp}
		})
}

func (a *api) getCheckpoint(w http.ResponseWriter, r *http.Request) (err error) {
	defer func() { a.Metrics.CheckpointRead(metrics.ReadGet, outcome(err)) }()
	var seq int64
	if s := chi.URLParam(r, "seq"); s != "latest" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("no such checkpoint: %w", checkpointd.ErrNotFound)
		}
		seq = n
	}
	sess, err := a.loadSession(r)
	if err != nil {
		return err
	}
	cp, err := a.Store.Checkpoints.GetCheckpoint(r.Context(), sess.ID, seq)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"checkpoint": cp})
}

func (a *api) listCheckpoints(w http.ResponseWriter, r *http.Request) (err error) {
	defer func() { a.Metrics.CheckpointRead(metrics.ReadList, outcome(err)) }()
	limit, c, err := page(r)
	if err != nil {
		return err
	}
	sess, err := a.loadSession(r)
	if err != nil {
		return err
	}
	items, err := a.Store.Checkpoints.ListCheckpoints(r.Context(), sess.ID, c.Seq, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newList(items, limit, func(s checkpointd.CheckpointSummary) cursor { return cursor{Seq: s.Seq} }))
}

// pendingMutation is the checkpoint's pending mutation with the forge's
// answer about it: {kind, target, idempotency_key, summary, outcome,
// evidence, reason, checked_at}.
type pendingMutation struct {
	*checkpointd.PendingMutation
	checkpointd.MutationAnswer
}

type resumeResponse struct {
	Resumable bool                 `json:"resumable"`
	Validity  checkpointd.Validity `json:"validity"`
	// Reasons are the documented strings: a word, or for the validity
	// "<validity>: <explanation>". Explanations has one entry per reason,
	// in the same order: the word alone (to match on) and what it means
	// here (to act on).
	Reasons         []string                `json:"reasons"`
	Explanations    []explanation           `json:"explanations"`
	Checkpoint      *checkpointd.Checkpoint `json:"checkpoint"`
	Live            *checkpointd.LiveRef    `json:"live"`
	PendingMutation *pendingMutation        `json:"pending_mutation,omitempty"`
	// Worktree is what the last reconcile pass found in the session's
	// worktree on this host (a dirty or diverged worktree is reported here,
	// never "fixed"); absent when none was checked.
	Worktree *reconcile.Worktree `json:"worktree,omitempty"`
	// Run is the current run with its liveness (nil while parked).
	Run    *checkpointd.Run `json:"run"`
	Parked bool             `json:"parked,omitempty"`
}

// resume answers whether the latest checkpoint can be resumed from. It is
// never a blind restore: only a valid checkpoint is resumable, and the
// reasons say what the agent must check otherwise.
func (a *api) resume(w http.ResponseWriter, r *http.Request) (err error) {
	defer func() { a.Metrics.CheckpointRead(metrics.ReadResume, outcome(err)) }()
	sess, err := a.loadSession(r)
	if err != nil {
		return err
	}
	if err := a.resumeSighting(r, sess); err != nil {
		return err
	}
	var cp *checkpointd.Checkpoint
	if sess.Latest != nil {
		// The latest, whichever it is now: its verdict and reason are read
		// together.
		if cp, err = a.Store.Checkpoints.GetCheckpoint(r.Context(), sess.ID, 0); err != nil {
			return err
		}
		if cp.Seq != sess.Latest.Seq { // a newer checkpoint may have moved the session
			if sess, err = a.Store.Sessions.GetSession(r.Context(), sess.ID); err != nil {
				return err
			}
		}
	}
	// The verdict, the run and the checkpoint all from the session as read
	// with that checkpoint.
	resp := resumeResponse{Validity: sess.Validity, Reasons: []string{}, Explanations: []explanation{}, Run: sess.CurrentRun, Parked: sess.Parked}
	// Read after the verdict, so the live head shown is never older than
	// the one the verdict was judged against.
	if resp.Live, err = a.Store.Sessions.LiveRef(r.Context(), sess); err != nil {
		return err
	}
	if resp.Worktree, err = a.lastWorktree(r.Context(), sess.ID); err != nil {
		return err
	}
	if sess.State != checkpointd.SessionActive {
		resp.add(reasonSessionEnded, endedExplanation(sess), false)
	}
	if cp == nil {
		resp.add(reasonNoCheckpoint, "no checkpoint written yet: nothing to resume from; start from the session's target", false)
		return writeJSON(w, http.StatusOK, resp)
	}
	resp.Checkpoint = cp
	resp.Validity = cp.Validity
	if cp.Validity != checkpointd.ValidityValid {
		resp.add(string(cp.Validity), checkpointd.ExplainValidity(cp.Validity, cp.ValidityReason), true)
	}
	if !cp.Complete {
		resp.add(reasonIncomplete, "the latest checkpoint misses "+strings.Join(cp.Missing, ", ")+
			": what it records may not be enough to go on from", false)
	}
	if cp.PendingMutation != nil {
		ans := a.resolveMutation(r.Context(), sess, cp)
		resp.PendingMutation = &pendingMutation{PendingMutation: cp.PendingMutation, MutationAnswer: ans}
		resp.add(pendingReason(ans.Outcome), pendingExplanation(cp.PendingMutation, ans), false)
	}
	resp.Resumable = sess.State == checkpointd.SessionActive && cp.Validity == checkpointd.ValidityValid
	return writeJSON(w, http.StatusOK, resp)
}
