package store

import (
	"context"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// DeliveryRecord is a webhook delivery as recorded for dedup and audit.
type DeliveryRecord struct {
	ID, Event, Forge, Repo string
}

// ApplyDelivery records a delivery and applies its observations in one
// transaction. A delivery id seen before has no second effect: duplicate is
// true and nothing changes. effects counts the sessions whose validity the
// delivery changes; a ref that moved is settled by the next Settle (the
// handler's, right after its answer), ended refs are settled here.
// Errors: ErrStoreUnavailable.
func (s *Store) ApplyDelivery(ctx context.Context, d DeliveryRecord, obs []checkpointd.Observation) (effects *checkpointd.ObservationEffects, duplicate bool, err error) {
	now := s.now()
	st, err := s.observeStatements(ctx)
	if err != nil {
		return nil, false, s.classify(err)
	}
	err = s.change(ctx, CauseWebhook, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		effects, duplicate = newEffects(), false
		res, err := tx.StmtxContext(ctx, st.insertDelivery).ExecContext(ctx, d.ID, d.Event, d.Forge, strings.ToLower(d.Repo), micros(now))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			duplicate = true
			return nil
		}
		for _, o := range obs {
			if err := s.observe(ctx, tx, ch, st, o, now, effects); err != nil {
				return err
			}
		}
		b, _ := jsonMarshal(effects)
		_, err = tx.StmtxContext(ctx, st.setEffects).ExecContext(ctx, b, d.ID)
		return err
	})
	if err != nil || duplicate {
		return nil, duplicate, err
	}
	return effects, false, nil
}

// Observe applies observations that come with no delivery (reconcile) and
// settles them. Its effects count sessions, as they moved once everything
// was settled: a session bound to two observed refs (a branch and its PR)
// counts once. Errors: ErrStoreUnavailable.
// What it moved is also recorded in track.
func (s *Store) Observe(ctx context.Context, obs []checkpointd.Observation, track ...*Moves) (*checkpointd.ObservationEffects, error) {
	refs := make([]ActiveRef, len(obs))
	for i, o := range obs {
		refs[i] = ActiveRef{Repo: o.Repo, Branch: o.Branch, PR: o.PR}
	}
	moves := NewMoves(refs)
	track = append(track, moves)
	now := s.now()
	var effects *checkpointd.ObservationEffects
	st, err := s.observeStatements(ctx)
	if err != nil {
		return nil, s.classify(err)
	}
	err = s.change(ctx, CauseReconcile, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		effects = newEffects()
		for _, o := range obs {
			if err := s.observe(ctx, tx, ch, st, o, now, effects); err != nil {
				return err
			}
		}
		return nil
	}, track...)
	if err != nil {
		return nil, err
	}
	// Reconcile is the authority and not in a hurry: its verdicts are in
	// place when it returns, and what they moved is counted from them
	// rather than predicted per ref.
	err = s.settle(ctx, track...)
	effects.Sessions = moves.Counts()
	return effects, err
}

func newEffects() *checkpointd.ObservationEffects {
	return &checkpointd.ObservationEffects{Sessions: map[string]int{}}
}

type liveRefRow struct {
	Head       string `db:"head"`
	State      string `db:"state"`
	ObservedAt int64  `db:"observed_at"`
	Source     string `db:"source"`
	Version    int64  `db:"version"`
}

// observeStatements are the statements every delivery runs, prepared.
type observeStatements struct {
	insertDelivery, setEffects, forgeRepo, prevLiveRef, upsertLiveRef, countBranch, countPR *sqlx.Stmt
}

// observeStatements prepares them; outside any transaction (prepared).
func (s *Store) observeStatements(ctx context.Context) (*observeStatements, error) {
	var st observeStatements
	for _, p := range []struct {
		dst   **sqlx.Stmt
		query string
	}{
		{&st.insertDelivery, `INSERT INTO deliveries (id, event, forge, repo_key, received_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`},
		{&st.setEffects, `UPDATE deliveries SET effects = ? WHERE id = ?`},
		{&st.forgeRepo, `INSERT INTO forge_repos (repo_id, full_name, seen_at) VALUES (?, ?, ?)
ON CONFLICT (repo_id) DO UPDATE SET full_name = excluded.full_name, seen_at = excluded.seen_at`},
		{&st.prevLiveRef, `SELECT head, state, observed_at, source FROM live_refs WHERE repo_key = ? AND ref = ?`},
		{&st.upsertLiveRef, upsertLiveRef},
		{&st.countBranch, countBoundSQL},
		{&st.countPR, countBoundPRSQL},
	} {
		prepared, err := s.prepared(ctx, s.wdb, p.query)
		if err != nil {
			return nil, err
		}
		*p.dst = prepared
	}
	return &st, nil
}

// upsertLiveRef records a ref's new live state and counts the observation
// in its version; the ref stays unsettled until its sessions are re-judged.
const upsertLiveRef = `
INSERT INTO live_refs (repo_key, ref, head, state, observed_at, source, version) VALUES (?, ?, ?, ?, ?, ?, 1)
ON CONFLICT (repo_key, ref) DO UPDATE SET head = excluded.head, state = excluded.state,
    observed_at = excluded.observed_at, source = excluded.source, version = live_refs.version + 1
RETURNING version`

// observe records one observation as the ref's live state and counts in eff
// what it changes for the active sessions bound to the ref. A ref that ended
// is settled here, with its leases released, in the caller's transaction; a
// ref that moved is settled after the answer (settle.go), because re-judging
// a thousand sessions must not hold up the forge's delivery.
func (s *Store) observe(ctx context.Context, tx *sqlx.Tx, ch *changes, st *observeStatements, o checkpointd.Observation, now time.Time, eff *checkpointd.ObservationEffects) error {
	repoKey, ref := strings.ToLower(o.Repo), o.RefName()
	if o.RepoID > 0 {
		if _, err := tx.StmtxContext(ctx, st.forgeRepo).ExecContext(ctx, o.RepoID, o.Repo, micros(now)); err != nil {
			return err
		}
	}
	var prev liveRefRow
	err := tx.StmtxContext(ctx, st.prevLiveRef).GetContext(ctx, &prev, repoKey, ref)
	if err = ignoreNoRows(err); err != nil {
		return err
	}
	state, apply := checkpointd.NextRefState(checkpointd.LiveRef{Head: prev.Head, State: checkpointd.LiveRefState(prev.State)}, o)
	if !apply {
		return nil
	}
	if state == checkpointd.RefAmbiguous {
		eff.Ambiguous++
	}
	row := liveRefRow{Head: o.Head, State: string(state), ObservedAt: micros(now), Source: o.Source}
	if err := tx.StmtxContext(ctx, st.upsertLiveRef).QueryRowxContext(ctx, repoKey, ref, row.Head, row.State, row.ObservedAt, row.Source).Scan(&row.Version); err != nil {
		return err
	}
	eff.LiveRefs++
	if !state.Gone() {
		count := st.countBranch
		if o.PR > 0 {
			count = st.countPR
		}
		moved, err := countRef(ctx, tx.StmtxContext(ctx, count), repoKey, ref, row)
		for to, n := range moved {
			eff.Sessions[to] += n
		}
		return err
	}
	groups, err := judgeRef(ctx, tx, repoKey, ref, row)
	if err != nil {
		return err
	}
	for c, ids := range groups {
		eff.Sessions[c.to] += len(ids)
	}
	if err := applyJudgement(ctx, tx, ch, repoKey, ref, row, groups, now); err != nil {
		return err
	}
	return s.releaseRefLeases(ctx, tx, ch, repoKey, o, now, eff)
}

type boundSession struct {
	ID       string `db:"id"`
	Head     string `db:"head"`
	Validity string `db:"validity"`
	Reason   string `db:"validity_reason"`
	LeasesOK bool   `db:"leases_ok"`
}

// validityChange is one group of sessions moving together.
type validityChange struct{ from, to, reason string }

// judgeRef applies the shared validity rule to every active session bound to
// a ref in the live state row, grouping the sessions whose validity it
// changes, to apply the change. It writes nothing. The sessions are locked
// on PostgreSQL, in id order: a checkpoint write holding one of them may
// have read the live ref before this one changed, so the judgement must
// read the head that write commits, not the one before it.
func judgeRef(ctx context.Context, tx *sqlx.Tx, repoKey, ref string, row liveRefRow) (map[validityChange][]string, error) {
	branch, pr := checkpointd.ParseRefKey(ref)
	q, arg := `SELECT id, head, validity, validity_reason, leases_ok FROM sessions WHERE repo_key = ? AND branch = ? AND state = 'active'`, any(branch)
	if pr > 0 {
		q, arg = `SELECT id, head, validity, validity_reason, leases_ok FROM sessions WHERE repo_key = ? AND pr = ? AND state = 'active'`, pr
	}
	if tx.DriverName() == "postgres" {
		q += ` ORDER BY id FOR UPDATE`
	}
	var bound []boundSession
	if err := tx.SelectContext(ctx, &bound, tx.Rebind(q), repoKey, arg); err != nil {
		return nil, err
	}
	groups := map[validityChange][]string{}
	live := row.liveRef(repoKey, ref)
	for _, b := range bound {
		if c, ok := judgeBound(b, live); ok {
			groups[c] = append(groups[c], b.ID)
		}
	}
	return groups, nil
}

// countBoundSQL reads the sessions bound to a branch (or, with pr for
// branch, to a PR) as one row per distinct (head, validity, leases).
const (
	countBoundSelect = `SELECT '' AS id, head, validity, '' AS validity_reason, leases_ok, COUNT(*) AS n FROM sessions
WHERE repo_key = ? AND `
	countBoundGroup = ` = ? AND state = 'active' GROUP BY head, validity, leases_ok`
	countBoundSQL   = countBoundSelect + "branch" + countBoundGroup
	countBoundPRSQL = countBoundSelect + "pr" + countBoundGroup
)

// countRef is judgeRef for a delivery's answer: how many sessions move to
// each validity. count is countBoundSQL for the ref's kind.
func countRef(ctx context.Context, count *sqlx.Stmt, repoKey, ref string, row liveRefRow) (map[string]int, error) {
	branch, pr := checkpointd.ParseRefKey(ref)
	arg := any(branch)
	if pr > 0 {
		arg = pr
	}
	var bound []struct {
		boundSession
		N int `db:"n"`
	}
	if err := count.SelectContext(ctx, &bound, repoKey, arg); err != nil {
		return nil, err
	}
	moved := map[string]int{}
	live := row.liveRef(repoKey, ref)
	for _, b := range bound {
		if c, ok := judgeBound(b.boundSession, live); ok && c.to != c.from {
			moved[c.to] += b.N
		}
	}
	return moved, nil
}

// judgeBound re-judges one bound session on the ref's live state and
// says whether its verdict changes (checkpointd.Rejudge).
func judgeBound(b boundSession, live *checkpointd.LiveRef) (validityChange, bool) {
	next, changed := checkpointd.Rejudge(checkpointd.Verdict{Validity: checkpointd.Validity(b.Validity), Reason: b.Reason},
		checkpointd.ValidityEvidence{LeasesHeld: b.LeasesOK, Head: b.Head, Live: live})
	return validityChange{b.Validity, string(next.Validity), next.Reason}, changed
}

// liveRef is the row as the evidence of a judgement about ref.
func (row liveRefRow) liveRef(repoKey, ref string) *checkpointd.LiveRef {
	l := &checkpointd.LiveRef{Repo: repoKey, Head: row.Head, State: checkpointd.LiveRefState(row.State),
		ObservedAt: fromMicros(row.ObservedAt), Source: row.Source}
	l.Branch, l.PR = checkpointd.ParseRefKey(ref)
	return l
}

// applyJudgement records judgeRef's changes, each with the ref's live state
// as its evidence, and marks the ref settled at the judged version.
func applyJudgement(ctx context.Context, tx *sqlx.Tx, ch *changes, repoKey, ref string, row liveRefRow, groups map[validityChange][]string, now time.Time) error {
	evidence := map[string]any{"source": row.Source, "ref": ref, "observed_head": row.Head, "ref_state": row.State}
	for c, ids := range groups {
		if err := setValidityMany(ctx, tx, ch, ids, now, checkpointd.Validity(c.from), checkpointd.Validity(c.to), c.reason, evidence); err != nil {
			return err
		}
		ch.move(repoKey, ref, ids, checkpointd.Validity(c.from), checkpointd.Validity(c.to))
	}
	_, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE live_refs SET settled_version = ? WHERE repo_key = ? AND ref = ? AND settled_version < ?`),
		row.Version, repoKey, ref, row.Version)
	return err
}
