package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// NewSession is what creating a session needs; the API validated it.
type NewSession struct {
	Repo         string
	Role         string
	Issue, PR    int64
	Branch       string
	Worktree     string
	Capabilities []string
	Agent        checkpointd.Agent
	CreatedBy    string // the token id, for the audit trail
	// Idempotency, when set, records the response under a claimed key.
	Idempotency *Idempotency
}

const insertSession = `
INSERT INTO sessions (id, repo, repo_key, role, issue, pr, branch, worktree, capabilities,
    state, created_by, created_at, updated_at, current_run_id, run_seq, event_seq,
    validity, validity_reason, validity_at, run_seen_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, 1, 2, 'unverified', ?, ?, ?)`

const insertRun = `
INSERT INTO runs (id, session_id, fencing_token, agent, started_at, takeover_reason)
VALUES (?, ?, ?, ?, ?, ?)`

// CreateSession creates an active session and its first run (fencing token
// 1), with their events, in one transaction. Errors: ErrDraining while a
// drain gates new sessions, ErrStoreUnavailable.
func (s *Store) CreateSession(ctx context.Context, in NewSession) (*checkpointd.Session, error) {
	defer s.requestEnded(in.Idempotency)
	now := s.now()
	sid, rid := checkpointd.NewID(checkpointd.PrefixSession), checkpointd.NewID(checkpointd.PrefixRun)
	caps := in.Capabilities
	if caps == nil {
		caps = []string{}
	}
	capsJSON, _ := json.Marshal(caps)
	agentJSON, _ := json.Marshal(in.Agent)
	var sess *checkpointd.Session
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		if err := s.refuseIfDraining(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(insertSession), sid, in.Repo, strings.ToLower(in.Repo), in.Role,
			in.Issue, in.PR, in.Branch, in.Worktree, string(capsJSON), in.CreatedBy,
			micros(now), micros(now), rid, checkpointd.ReasonNoCheckpoint, micros(now), micros(now)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(insertRun), rid, sid, 1, string(agentJSON), micros(now), ""); err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, sid, 1, now, checkpointd.EventSessionCreated, rid,
			map[string]any{"repo": in.Repo, "role": in.Role, "issue": in.Issue, "pr": in.PR, "branch": in.Branch}); err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, sid, 2, now, checkpointd.EventRunStarted, rid,
			map[string]any{"fencing_token": 1, "agent": in.Agent}); err != nil {
			return err
		}
		if in.Idempotency == nil {
			return nil
		}
		var row sessionRow
		if err := tx.GetContext(ctx, &row, tx.Rebind(selectSession+` WHERE s.id = ?`), sid); err != nil {
			return err
		}
		sess = row.session(now, s.liveness())
		return s.complete(ctx, tx, in.Idempotency, sess)
	})
	if err != nil {
		return nil, err
	}
	if sess != nil {
		return sess, nil
	}
	return s.getSession(ctx, sid)
}

// sessionRow is a session joined with its current run and latest checkpoint.
type sessionRow struct {
	ID             string         `db:"id"`
	Repo           string         `db:"repo"`
	Role           string         `db:"role"`
	Issue          int64          `db:"issue"`
	PR             int64          `db:"pr"`
	Branch         string         `db:"branch"`
	Worktree       string         `db:"worktree"`
	Capabilities   string         `db:"capabilities"`
	State          string         `db:"state"`
	Outcome        string         `db:"outcome"`
	EndReason      string         `db:"end_reason"`
	EndedBy        string         `db:"ended_by"`
	CreatedAt      int64          `db:"created_at"`
	UpdatedAt      int64          `db:"updated_at"`
	EndedAt        sql.NullInt64  `db:"ended_at"`
	Validity       string         `db:"validity"`
	ValidityReason string         `db:"validity_reason"`
	ValidityAt     int64          `db:"validity_at"`
	RunID          string         `db:"run_id"`
	RunToken       int64          `db:"run_token"`
	RunAgent       string         `db:"run_agent"`
	RunStartedAt   int64          `db:"run_started_at"`
	RunReason      string         `db:"run_reason"`
	RunSeenAt      int64          `db:"run_seen_at"`
	CheckpointAt   int64          `db:"checkpoint_at"`
	CkSeq          sql.NullInt64  `db:"ck_seq"`
	CkRunID        sql.NullString `db:"ck_run_id"`
	CkStage        sql.NullString `db:"ck_stage"`
	CkBranch       sql.NullString `db:"ck_branch"`
	CkHead         sql.NullString `db:"ck_head"`
	CkCreatedAt    sql.NullInt64  `db:"ck_created_at"`
	CkComplete     sql.NullBool   `db:"ck_complete"`
	CkMissing      sql.NullString `db:"ck_missing"`
	CkDigest       sql.NullString `db:"ck_digest"`
	WaitingOn      string         `db:"waiting_on"`
	NextActor      string         `db:"next_actor"`
}

const selectSession = `
SELECT s.id, s.repo, s.role, s.issue, s.pr, s.branch, s.worktree, s.capabilities, s.state,
    s.outcome, s.end_reason, s.ended_by, s.created_at, s.updated_at, s.ended_at, s.validity, s.validity_reason, s.validity_at,
    COALESCE(r.id, '') AS run_id, COALESCE(r.fencing_token, 0) AS run_token, COALESCE(r.agent, '{}') AS run_agent,
    COALESCE(r.started_at, 0) AS run_started_at, COALESCE(r.takeover_reason, '') AS run_reason,
    s.run_seen_at, s.checkpoint_at,
    c.seq AS ck_seq, c.run_id AS ck_run_id, c.stage AS ck_stage, c.branch AS ck_branch,
    c.head AS ck_head, c.created_at AS ck_created_at, c.complete AS ck_complete,
    c.missing AS ck_missing, c.digest AS ck_digest, s.waiting_on, s.next_actor
FROM sessions s
LEFT JOIN runs r ON r.id = s.current_run_id
LEFT JOIN checkpoints c ON c.session_id = s.id AND c.seq = s.checkpoint_seq`

// session converts the row, judging the current run's liveness at now
// against window. A parked session (active, no current run) has none.
func (r *sessionRow) session(now time.Time, window time.Duration) *checkpointd.Session {
	out := &checkpointd.Session{
		ID: r.ID, Repo: r.Repo, Role: r.Role, Issue: r.Issue, PR: r.PR, Branch: r.Branch,
		Worktree: r.Worktree, State: checkpointd.SessionState(r.State), Outcome: checkpointd.Outcome(r.Outcome),
		EndReason: r.EndReason, EndedBy: r.EndedBy,
		CreatedAt: fromMicros(r.CreatedAt), UpdatedAt: fromMicros(r.UpdatedAt), EndedAt: fromNullMicros(r.EndedAt),
		Validity: checkpointd.Validity(r.Validity), ValidityReason: checkpointd.ExplainValidity(checkpointd.Validity(r.Validity), r.ValidityReason), ValidityAt: fromMicros(r.ValidityAt),
		Capabilities: []string{}, Leases: []checkpointd.HeldLease{}, ActivityAt: fromMicros(r.RunSeenAt),
	}
	_ = json.Unmarshal([]byte(r.Capabilities), &out.Capabilities)
	if out.State == checkpointd.SessionActive && r.RunID == "" {
		out.Parked = true
	} else if out.State == checkpointd.SessionActive {
		run := &checkpointd.Run{ID: r.RunID, SessionID: r.ID, FencingToken: r.RunToken,
			StartedAt: fromMicros(r.RunStartedAt), TakeoverReason: r.RunReason}
		_ = json.Unmarshal([]byte(r.RunAgent), &run.Agent)
		seen, live := lastSeen(r.RunSeenAt, r.CheckpointAt, now, window)
		run.LastSeenAt, run.Live = &seen, &live
		out.CurrentRun = run
	}
	if r.CkSeq.Valid {
		out.Latest = &checkpointd.CheckpointSummary{
			Seq: r.CkSeq.Int64, RunID: r.CkRunID.String, Stage: r.CkStage.String, Branch: r.CkBranch.String,
			Head: r.CkHead.String, CreatedAt: fromMicros(r.CkCreatedAt.Int64), Complete: r.CkComplete.Bool,
			Missing: decodeMissing(r.CkMissing.String), Digest: r.CkDigest.String,
			WaitingOn: r.WaitingOn, NextActor: r.NextActor,
		}
	}
	return out
}

// GetSession returns a session with its current run and latest checkpoint
// summary. Errors: checkpointd.ErrNotFound, *checkpointd.GoneError
// (ErrGone: cleared or pruned), checkpointd.ErrStoreUnavailable.
func (s *Store) GetSession(ctx context.Context, id string) (*checkpointd.Session, error) {
	return s.getSession(ctx, id)
}

// getSession is GetSession without settling first: the answer of a write
// that committed must not turn into a failure because settling some ref
// failed, nor wait for it.
func (s *Store) getSession(ctx context.Context, id string) (*checkpointd.Session, error) {
	var row sessionRow
	err := s.rdb.GetContext(ctx, &row, s.rdb.Rebind(selectSession+` WHERE s.id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, s.classify(notFoundOrGone(ctx, s.rdb, id))
	}
	if err != nil {
		return nil, s.classify(err)
	}
	now := s.now()
	sess := row.session(now, s.liveness())
	if err := s.fillLeases(ctx, now, []*checkpointd.Session{sess}); err != nil {
		return nil, err
	}
	return sess, nil
}

// scopeCondition turns a token's repo scope (owner/name or owner/*) into a
// SQL condition on the lower-cased repo key column; owner/* compares
// ownerColumn, when the table has one (sessions.repo_owner, indexed), else
// a prefix of column.
func scopeCondition(scope []string, column, ownerColumn string) (string, []any) {
	if len(scope) == 0 {
		return "1 = 0", nil
	}
	var parts []string
	var args []any
	for _, sc := range scope {
		sc = strings.ToLower(sc)
		if name, ok := strings.CutSuffix(sc, "/*"); ok {
			if ownerColumn != "" {
				parts = append(parts, ownerColumn+" = ?")
				args = append(args, name)
				continue
			}
			// Owner names cannot contain LIKE wildcards except '_' and the
			// repo pattern allows '_' and '.', so compare the prefix exactly.
			parts = append(parts, "substr("+column+", 1, ?) = ?")
			args = append(args, len(name)+1, name+"/")
		} else {
			parts = append(parts, column+" = ?")
			args = append(args, sc)
		}
	}
	return "(" + strings.Join(parts, " OR ") + ")", args
}

func decodeMissing(s string) []string {
	var m []string
	_ = json.Unmarshal([]byte(s), &m)
	if m == nil {
		m = []string{}
	}
	return m
}
