package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// ActiveRef is one distinct ref that active sessions are bound to: a branch
// head or a pull request of a repo. Reconcile asks the forge once per ref,
// whatever the number of sessions on it.
type ActiveRef struct {
	Repo     string // owner/name as the first session spelled it
	Branch   string // set for a branch ref …
	PR       int64  // … or a PR number
	Sessions []string
	// Unverified: one of its sessions is unverified (a pass asks about
	// these first: none of them can resume until it has).
	Unverified bool
}

// Name is how the ref is keyed in live_refs and reports: branch:<name> or pr:<n>.
func (r ActiveRef) Name() string {
	return checkpointd.Observation{Branch: r.Branch, PR: r.PR}.RefName()
}

// ActiveWorktree is the worktree a session recorded, with what its latest
// checkpoint says the worktree should hold.
type ActiveWorktree struct {
	SessionID, Repo, Branch, Head, Path string
}

// ActiveSet is what a reconcile pass checks: the active sessions that can
// still change validity (invalidated is final), their distinct refs and
// their recorded worktrees.
type ActiveSet struct {
	Sessions  int
	Repos     []string // distinct repos, as first spelled
	Refs      []ActiveRef
	Worktrees []ActiveWorktree
}

// ActiveRefs collects the distinct refs of every active, not invalidated
// session, in a stable order. Errors: ErrStoreUnavailable.
func (s *Store) ActiveRefs(ctx context.Context) (*ActiveSet, error) {
	var rows []struct {
		ID       string `db:"id"`
		Repo     string `db:"repo"`
		RepoKey  string `db:"repo_key"`
		Branch   string `db:"branch"`
		PR       int64  `db:"pr"`
		Worktree string `db:"worktree"`
		Head     string `db:"head"`
		Validity string `db:"validity"`
	}
	if err := s.rdb.SelectContext(ctx, &rows, `SELECT id, repo, repo_key, branch, pr, worktree, head, validity FROM sessions
WHERE state = 'active' AND validity <> 'invalidated' ORDER BY id`); err != nil {
		return nil, s.classify(err)
	}
	set := &ActiveSet{Sessions: len(rows)}
	refs, repos := map[string]*ActiveRef{}, map[string]bool{}
	add := func(repoKey, repo, branch string, pr int64, id string, unverified bool) {
		r := ActiveRef{Repo: repo, Branch: branch, PR: pr}
		key := repoKey + "\x00" + r.Name()
		if refs[key] == nil {
			refs[key] = &r
		}
		refs[key].Sessions = append(refs[key].Sessions, id)
		refs[key].Unverified = refs[key].Unverified || unverified
	}
	for _, r := range rows {
		if !repos[r.RepoKey] {
			repos[r.RepoKey] = true
			set.Repos = append(set.Repos, r.Repo)
		}
		unverified := r.Validity == string(checkpointd.ValidityUnverified)
		if r.Branch != "" {
			add(r.RepoKey, r.Repo, r.Branch, 0, r.ID, unverified)
		}
		if r.PR > 0 {
			add(r.RepoKey, r.Repo, "", r.PR, r.ID, unverified)
		}
		if r.Worktree != "" {
			set.Worktrees = append(set.Worktrees, ActiveWorktree{SessionID: r.ID, Repo: r.Repo, Branch: r.Branch, Head: r.Head, Path: r.Worktree})
		}
	}
	keys := make([]string, 0, len(refs))
	for k := range refs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		set.Refs = append(set.Refs, *refs[k])
	}
	return set, nil
}

// ResetValidity makes every active session that is not invalidated
// unverified, each with a validity.changed event giving reason, and marks
// every open live ref ambiguous. The daemon calls it at boot, before it
// serves: webhooks sent while it was down are lost, so nothing it observed
// before counts until reconcile has asked the forge again. It returns how
// many sessions changed. Errors: ErrStoreUnavailable.
func (s *Store) ResetValidity(ctx context.Context, reason string) (int, error) {
	now := s.now()
	n := 0
	err := s.change(ctx, CauseRestart, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		n = 0
		var rows []struct {
			ID       string `db:"id"`
			Validity string `db:"validity"`
			Reason   string `db:"validity_reason"`
		}
		if err := tx.SelectContext(ctx, &rows, `SELECT id, validity, validity_reason FROM sessions
WHERE state = 'active' AND validity <> 'unverified' ORDER BY id`); err != nil {
			return err
		}
		byFrom := map[checkpointd.Validity][]string{}
		for _, r := range rows {
			if _, changed := checkpointd.Restarted(checkpointd.Verdict{Validity: checkpointd.Validity(r.Validity), Reason: r.Reason}, reason); changed {
				byFrom[checkpointd.Validity(r.Validity)] = append(byFrom[checkpointd.Validity(r.Validity)], r.ID)
			}
		}
		for from, ids := range byFrom {
			if err := setValidityMany(ctx, tx, ch, ids, now, from, checkpointd.ValidityUnverified, reason,
				map[string]any{"source": "boot"}); err != nil {
				return err
			}
			n += len(ids)
		}
		_, err := tx.ExecContext(ctx, `UPDATE live_refs SET state = 'ambiguous', settled_version = version WHERE state = 'open'`)
		return err
	})
	return n, err
}

// MarkUnverified records that the forge could not answer for refs: their
// open live refs become ambiguous (no evidence) and every active session
// bound to them is re-judged without a live head, so it becomes (or stays)
// unverified with reason — never valid — unless a lost lease keeps it
// lease_lost. It returns how many sessions moved to each validity, and
// records the moves in track. Errors: ErrStoreUnavailable.
func (s *Store) MarkUnverified(ctx context.Context, refs []ActiveRef, reason, source string, track ...*Moves) (map[string]int, error) {
	now := s.now()
	var moved map[string]int
	err := s.change(ctx, CauseReconcile, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		moved = map[string]int{}
		for _, ref := range refs {
			repoKey := strings.ToLower(ref.Repo)
			if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE live_refs SET state = 'ambiguous' WHERE repo_key = ? AND ref = ? AND state = 'open'`),
				repoKey, ref.Name()); err != nil {
				return err
			}
			q, arg := `SELECT id, head, validity, validity_reason, leases_ok FROM sessions WHERE repo_key = ? AND branch = ? AND state = 'active'`, any(ref.Branch)
			if ref.PR > 0 {
				q, arg = `SELECT id, head, validity, validity_reason, leases_ok FROM sessions WHERE repo_key = ? AND pr = ? AND state = 'active'`, ref.PR
			}
			var bound []boundSession
			if err := tx.SelectContext(ctx, &bound, tx.Rebind(q), repoKey, arg); err != nil {
				return err
			}
			// Re-judged without a live head: unverified for reason, unless a
			// lost lease keeps it lease_lost. An unverified session takes
			// the new reason too (once, not every pass): the resume answer
			// should say why.
			groups := map[validityChange][]string{}
			for _, b := range bound {
				next, changed := checkpointd.Rejudge(checkpointd.Verdict{Validity: checkpointd.Validity(b.Validity), Reason: b.Reason},
					checkpointd.ValidityEvidence{LeasesHeld: b.LeasesOK, Head: b.Head, Unanswered: reason})
				if changed {
					c := validityChange{b.Validity, string(next.Validity), next.Reason}
					groups[c] = append(groups[c], b.ID)
				}
			}
			evidence := map[string]any{"source": source, "ref": ref.Name()}
			for c, ids := range groups {
				if err := setValidityMany(ctx, tx, ch, ids, now, checkpointd.Validity(c.from), checkpointd.Validity(c.to), c.reason, evidence); err != nil {
					return err
				}
				ch.move(repoKey, ref.Name(), ids, checkpointd.Validity(c.from), checkpointd.Validity(c.to))
				if c.from != c.to {
					moved[c.to] += len(ids)
				}
			}
		}
		return nil
	}, track...)
	return moved, err
}

// SessionVerdict is one active session's validity and why.
type SessionVerdict struct {
	SessionID, Repo string
	Validity        checkpointd.Validity
	Reason          string
}

// ValiditySummary counts the active sessions by validity and lists up to
// limit of those that are not valid, oldest first. Errors: ErrStoreUnavailable.
func (s *Store) ValiditySummary(ctx context.Context, limit int) (map[string]int, []SessionVerdict, error) {
	var counts []struct {
		Validity string `db:"validity"`
		N        int    `db:"n"`
	}
	if err := s.rdb.SelectContext(ctx, &counts, `SELECT validity, COUNT(*) AS n FROM sessions WHERE state = 'active' GROUP BY validity`); err != nil {
		return nil, nil, s.classify(err)
	}
	out := map[string]int{}
	for _, c := range counts {
		out[c.Validity] = c.N
	}
	var rows []struct {
		ID       string `db:"id"`
		Repo     string `db:"repo"`
		Validity string `db:"validity"`
		Reason   string `db:"validity_reason"`
	}
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(`SELECT id, repo, validity, validity_reason FROM sessions
WHERE state = 'active' AND validity <> 'valid' ORDER BY id LIMIT ?`), limit); err != nil {
		return nil, nil, s.classify(err)
	}
	verdicts := make([]SessionVerdict, len(rows))
	for i, r := range rows {
		v := checkpointd.Validity(r.Validity)
		verdicts[i] = SessionVerdict{SessionID: r.ID, Repo: r.Repo, Validity: v, Reason: checkpointd.ExplainValidity(v, r.Reason)}
	}
	return out, verdicts, nil
}

// keptReports bounds the reconcile_reports table.
const keptReports = 50

// SaveReconcileReport stores a pass's JSON report under its id (time
// ordered) and prunes all but the latest reports. Errors: ErrStoreUnavailable.
func (s *Store) SaveReconcileReport(ctx context.Context, id string, report []byte) error {
	now := s.now()
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO reconcile_reports (id, finished_at, report) VALUES (?, ?, ?)
ON CONFLICT (id) DO UPDATE SET finished_at = excluded.finished_at, report = excluded.report`), id, micros(now), string(report)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM reconcile_reports WHERE id NOT IN
(SELECT id FROM reconcile_reports ORDER BY id DESC LIMIT ?)`), keptReports)
		return err
	})
}

// LastReconcileReport returns the newest stored report.
// Errors: ErrNotFound before the first pass finished, ErrStoreUnavailable.
func (s *Store) LastReconcileReport(ctx context.Context) (json.RawMessage, error) {
	var report string
	err := s.rdb.GetContext(ctx, &report, `SELECT report FROM reconcile_reports ORDER BY id DESC LIMIT 1`)
	if err = ignoreNoRows(err); err != nil {
		return nil, s.classify(err)
	}
	if report == "" {
		return nil, fmt.Errorf("no reconcile pass has finished yet: %w", checkpointd.ErrNotFound)
	}
	return json.RawMessage(report), nil
}

// EventLeaseMismatch records a held lease whose holder is not its session's
// current run, found by reconcile and released: a takeover that happened
// while the lease could not move, or a row left behind by a crash.
const EventLeaseMismatch = "lease.mismatch"

// LeaseReconcile counts what ReconcileLeases changed.
type LeaseReconcile struct {
	Expired    int // held leases past their time, ended
	Mismatched int // held by a run that is not the session's current run, released
	LeaseLost  int // sessions moved to lease_lost: their checkpoint names a lease their run does not hold
	Audited    int // active sessions whose latest checkpoint's leases this pass checked (judgeNamedLeases)
}

// ReconcileLeases checks the lease records against the sessions: held
// leases past their time end (lease.expired), a held lease whose run is not
// its session's current run is released with a lease.mismatch event, and a
// session whose latest checkpoint names a lease its current run does not
// hold is judged lease_lost. source (reconcile:<pass id>) is the evidence.
// Errors: ErrStoreUnavailable.
func (s *Store) ReconcileLeases(ctx context.Context, source string) (LeaseReconcile, error) {
	var out LeaseReconcile
	const batch = 500
	for {
		n, err := s.ExpireLeases(ctx, batch)
		out.Expired += n
		if err != nil || n < batch {
			if err != nil {
				return out, err
			}
			break
		}
	}
	ids, err := s.auditMismatches(ctx)
	if err != nil {
		return out, s.classify(err)
	}
	for _, id := range ids {
		released, err := s.releaseMismatch(ctx, id, source)
		if err != nil {
			return out, err
		}
		if released {
			out.Mismatched++
		}
	}
	n, audited, err := s.judgeNamedLeases(ctx, source)
	out.LeaseLost, out.Audited = n, audited
	return out, err
}

// releaseMismatch releases lease id if, under the session's row lock, it is
// still held by a run that is not the session's current run.
func (s *Store) releaseMismatch(ctx context.Context, id, source string) (bool, error) {
	now := s.now()
	released := false
	err := s.change(ctx, CauseReconcile, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		released = false
		l, err := s.getLease(ctx, tx, id)
		if err != nil || l.State != checkpointd.LeaseHeld {
			return ignoreNotFound(err)
		}
		var cur struct {
			State string `db:"state"`
			Run   string `db:"current_run_id"`
		}
		if err := tx.GetContext(ctx, &cur, tx.Rebind(`SELECT state, current_run_id FROM sessions WHERE id = ?`), l.Holder.SessionID); err != nil {
			return ignoreNoRows(err)
		}
		if cur.State == string(checkpointd.SessionActive) && cur.Run == l.Holder.RunID {
			return nil // taken over and moved meanwhile
		}
		if err := appendEvent(ctx, tx, l.Holder.SessionID, now, EventLeaseMismatch, l.Holder.RunID, map[string]any{
			"lease_id": l.ID, "resource": l.Resource, "holder_run": l.Holder.RunID, "current_run": cur.Run,
			"session_state": cur.State, "source": source}); err != nil {
			return err
		}
		released = true
		return s.endLease(ctx, tx, ch, l, checkpointd.LeaseReleased, "run_mismatch", now)
	})
	if errors.Is(err, errLeaseUnchanged) {
		return false, nil // renewed or ended meanwhile: nothing to release
	}
	return released, err
}

// namedLeaseRows reads the active sessions that rely on leases: leases_ok
// already false, or a latest checkpoint that names one. The LIKE only
// narrows the rows read; the document decides (lostNamedLease).
const namedLeaseRows = `SELECT s.id, s.current_run_id, s.validity, s.validity_reason, s.leases_ok, c.document
FROM sessions s JOIN checkpoints c ON c.session_id = s.id AND c.seq = s.checkpoint_seq
WHERE s.state = 'active' AND s.validity NOT IN ('invalidated', 'lease_lost')
  AND (NOT s.leases_ok OR c.document LIKE '%"lease_id"%')`

type namedLeaseRow struct {
	ID       string `db:"id"`
	Run      string `db:"current_run_id"`
	Validity string `db:"validity"`
	Reason   string `db:"validity_reason"`
	LeasesOK bool   `db:"leases_ok"`
	Document string `db:"document"`
}

// lostNamedLease is the first lease r's document names that its current
// run does not hold at now ("" when it holds them all).
func lostNamedLease(ctx context.Context, q sqlx.ExtContext, r namedLeaseRow, now time.Time) (string, error) {
	var doc checkpointd.Document
	if err := jsonUnmarshal(r.Document, &doc); err != nil {
		return "", err
	}
	if len(doc.Leases) == 0 {
		return "", nil
	}
	held, err := heldByRun(ctx, q, r.Run, now)
	if err != nil {
		return "", err
	}
	for _, l := range doc.Leases {
		if _, ok := held[l.LeaseID]; !ok {
			return l.LeaseID, nil
		}
	}
	return "", nil
}

// selectLeasesNotOK reads the active sessions whose leases_ok is false but
// whose verdict does not show it yet (after the boot reset made them
// unverified, say): a range of sessions_leases_ok (00038), as small as
// the sessions that lost a lease.
const selectLeasesNotOK = `SELECT id FROM sessions WHERE state = 'active' AND leases_ok = FALSE
AND validity NOT IN ('invalidated', 'lease_lost') ORDER BY id`

// selectLeaseAudit reads the next ? active sessions after ? (a range of
// sessions_state_id) with the document of the latest checkpoint where it
// may name a lease (empty where it cannot).
const selectLeaseAudit = `SELECT s.id, s.current_run_id, s.validity, s.validity_reason, s.leases_ok,
  CASE WHEN c.document LIKE '%"lease_id"%' THEN c.document ELSE '' END AS document
FROM (SELECT id, current_run_id, validity, validity_reason, leases_ok, checkpoint_seq FROM sessions
  WHERE state = 'active' AND id > ? ORDER BY id LIMIT ?) s
LEFT JOIN checkpoints c ON c.session_id = s.id AND c.seq = s.checkpoint_seq
ORDER BY s.id`

// leaseAuditChunk is how many active sessions one reconcile pass audits
// for leases named but not held (a var for tests).
var leaseAuditChunk = 5000

// leaseAudit is where the audits go on at the next pass: the session id
// and the lease id each read up to ("" to start over).
type leaseAudit struct {
	mu                sync.Mutex
	after, afterLease string
}

// mismatchRow is a lease row of the mismatch audit, with its session.
type mismatchRow struct {
	ID           string         `db:"id"`
	State        string         `db:"state"`
	SessionState sql.NullString `db:"session_state"`
	CurrentRun   sql.NullString `db:"current_run_id"`
	Run          string         `db:"run_id"`
}

// selectMismatchAudit reads, of the next ? lease rows after ? (a range of
// the primary key, whatever their state), the held ones whose run is not
// their session's current run.
const selectMismatchAudit = `SELECT l.id, l.state, s.state AS session_state, s.current_run_id, l.run_id
FROM (SELECT id, state, session_id, run_id FROM leases WHERE id > ? ORDER BY id LIMIT ?) l
LEFT JOIN sessions s ON s.id = l.session_id
ORDER BY l.id`

// auditMismatches returns the held leases, of the next leaseAuditChunk
// lease rows, whose run is not their session's current run. A run that
// stops being current (a takeover, a new run, a park, an end) moves or
// releases its leases in the same transaction, so this finds what was
// changed outside the daemon (or an old version's leftovers): like the
// named-lease audit it goes round the leases over the passes rather than
// join every held lease on each.
func (s *Store) auditMismatches(ctx context.Context) ([]string, error) {
	s.audit.mu.Lock()
	defer s.audit.mu.Unlock()
	var rows []mismatchRow
	next, err := auditSlice(ctx, s.rdb, selectMismatchAudit, s.audit.afterLease, &rows, func(r mismatchRow) string { return r.ID })
	if err != nil {
		return nil, err
	}
	s.audit.afterLease = next
	var ids []string
	for _, r := range rows {
		if r.State == string(checkpointd.LeaseHeld) && r.SessionState.Valid &&
			(r.SessionState.String != string(checkpointd.SessionActive) || r.CurrentRun.String != r.Run) {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}

// judgeNamedLeases applies the lease half of the validity rule to the
// active sessions that rely on leases. leases_ok is kept by the writes
// (the checkpoint's leases held when it was written) and by every lease
// that ends (rejudgeLeases), so a pass judges every session whose
// leases_ok is already false, and audits only the next leaseAuditChunk
// active sessions for a latest checkpoint naming a lease its run does not
// hold now (a lease row changed outside the daemon, say): the audit goes
// round the fleet over several passes (5000 a pass: 100k sessions every
// 20 passes), so a pass costs what changed and a bounded slice, not every
// session's checkpoint. The sessions are read on a reader, outside the
// write lock; only those that need a change are read again and judged in
// the write transaction. It returns the sessions judged lease_lost and
// the sessions audited.
func (s *Store) judgeNamedLeases(ctx context.Context, source string) (int, int, error) {
	now := s.now()
	var ids []string
	if err := s.rdb.SelectContext(ctx, &ids, selectLeasesNotOK); err != nil {
		return 0, 0, s.classify(err)
	}
	audited, lost, err := s.auditNamedLeases(ctx, now)
	if err != nil {
		return 0, audited, s.classify(err)
	}
	ids = append(ids, lost...)
	if len(ids) == 0 {
		return 0, audited, nil
	}
	n, err := s.rejudgeNamedLeases(ctx, source, ids, now)
	return n, audited, err
}

// auditNamedLeases reads the next slice of the audit and returns how many
// sessions it read and those whose latest checkpoint names a lease their
// current run does not hold at now.
func (s *Store) auditNamedLeases(ctx context.Context, now time.Time) (int, []string, error) {
	s.audit.mu.Lock()
	defer s.audit.mu.Unlock()
	var rows []namedLeaseRow
	next, err := auditSlice(ctx, s.rdb, selectLeaseAudit, s.audit.after, &rows, func(r namedLeaseRow) string { return r.ID })
	if err != nil {
		return 0, nil, err
	}
	var naming []namedLeaseRow
	var runs []string
	for _, r := range rows {
		if r.LeasesOK && r.Document != "" && r.Validity != string(checkpointd.ValidityInvalidated) && r.Validity != string(checkpointd.ValidityLeaseLost) {
			naming, runs = append(naming, r), append(runs, r.Run)
		}
	}
	held := map[string]map[string]bool{} // run → lease ids it holds
	for chunk := range slices.Chunk(runs, decisionChunk) {
		var part []struct {
			ID  string `db:"id"`
			Run string `db:"run_id"`
		}
		if err := selectIn(ctx, s.rdb, &part, `SELECT id, run_id FROM leases WHERE state = 'held' AND expires_at > ? AND run_id IN (?)`, micros(now), chunk); err != nil {
			return 0, nil, err
		}
		for _, l := range part {
			if held[l.Run] == nil {
				held[l.Run] = map[string]bool{}
			}
			held[l.Run][l.ID] = true
		}
	}
	var lost []string
	for _, r := range naming {
		var doc struct {
			Leases []checkpointd.LeaseRef `json:"leases"`
		}
		if err := jsonUnmarshal(r.Document, &doc); err != nil {
			return 0, nil, err
		}
		for _, l := range doc.Leases {
			if !held[r.Run][l.LeaseID] {
				lost = append(lost, r.ID)
				break
			}
		}
	}
	s.audit.after = next
	return len(rows), lost, nil
}

// auditSlice reads into rows the next leaseAuditChunk rows of query (its
// parameters: the id to read after, the limit) after the cursor, and
// starts over when the last slice ended the table exactly (or it shrank).
// It returns the cursor for the next pass ("" to start over), which the
// caller keeps once it has dealt with the slice: a slice whose pass
// failed is read again.
func auditSlice[T any](ctx context.Context, db *sqlx.DB, query, after string, rows *[]T, id func(T) string) (next string, err error) {
	read := func(after string) error {
		*rows = nil
		return db.SelectContext(ctx, rows, db.Rebind(query), after, leaseAuditChunk)
	}
	err = read(after)
	if err == nil && len(*rows) == 0 && after != "" {
		err = read("")
	}
	if err != nil || len(*rows) < leaseAuditChunk {
		return "", err
	}
	return id((*rows)[len(*rows)-1]), nil
}

// rejudgeNamedLeases judges sessions ids again in one write transaction,
// each as it stands then.
func (s *Store) rejudgeNamedLeases(ctx context.Context, source string, ids []string, now time.Time) (int, error) {
	slices.Sort(ids)
	ids = slices.Compact(ids)
	n := 0
	err := s.change(ctx, CauseReconcile, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		n = 0
		var rows []namedLeaseRow
		for chunk := range slices.Chunk(ids, decisionChunk) {
			var part []namedLeaseRow
			if err := selectIn(ctx, tx, &part, namedLeaseRows+` AND s.id IN (?) ORDER BY s.id`, chunk); err != nil {
				return err
			}
			rows = append(rows, part...)
		}
		for _, r := range rows {
			missing := ""
			if r.LeasesOK {
				var err error
				if missing, err = lostNamedLease(ctx, tx, r, now); err != nil {
					return err
				}
				if missing == "" {
					continue
				}
				if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions SET leases_ok = FALSE WHERE id = ?`), r.ID); err != nil {
					return err
				}
			}
			current := checkpointd.Verdict{Validity: checkpointd.Validity(r.Validity), Reason: r.Reason}
			next, changed := checkpointd.Rejudge(current, checkpointd.ValidityEvidence{LeasesHeld: false})
			if !changed {
				continue
			}
			evidence := map[string]any{"source": source}
			if missing != "" {
				evidence["lease_id"] = missing
			}
			if err := recordVerdict(ctx, tx, ch, r.ID, now, current, next, evidence); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

func ignoreNotFound(err error) error {
	if errors.Is(err, checkpointd.ErrNotFound) {
		return nil
	}
	return err
}

// RepoRename is a repo that sessions name but the forge now knows by
// another name: the same repository id under a new owner/name.
type RepoRename struct {
	Repo    string // as sessions name it
	RepoID  int64
	NewName string
}

// RepoRenames remembers which forge repository id each session repo name
// stands for — learned (lower-cased owner/name → id, from forge answers
// under that very name) and what webhooks recorded in forge_repos — and
// returns the repos whose id forge_repos now knows under another name.
// Renames and transfers send no webhook; this is how they show.
// Errors: ErrStoreUnavailable.
func (s *Store) RepoRenames(ctx context.Context, repos []string, learned map[string]int64) ([]RepoRename, error) {
	now := s.now()
	spelled := map[string]string{}
	var keys []string
	for _, r := range repos {
		k := strings.ToLower(r)
		if _, dup := spelled[k]; !dup {
			spelled[k] = r
			keys = append(keys, k)
		}
	}
	var out []RepoRename
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		out = nil
		for k, id := range learned {
			if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO repo_ids (repo_key, repo_id, seen_at) VALUES (?, ?, ?)
ON CONFLICT (repo_key) DO UPDATE SET repo_id = excluded.repo_id, seen_at = excluded.seen_at`), strings.ToLower(k), id, micros(now)); err != nil {
				return err
			}
		}
		for rest := keys; len(rest) > 0; {
			part := rest[:min(len(rest), 500)]
			rest = rest[len(part):]
			q, args, err := sqlx.In(`INSERT INTO repo_ids (repo_key, repo_id, seen_at)
SELECT lower(full_name), repo_id, seen_at FROM forge_repos WHERE lower(full_name) IN (?)
ON CONFLICT (repo_key) DO NOTHING`, part)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, tx.Rebind(q), args...); err != nil {
				return err
			}
			var rows []struct {
				Key  string `db:"repo_key"`
				ID   int64  `db:"repo_id"`
				Name string `db:"full_name"`
			}
			if q, args, err = sqlx.In(`SELECT r.repo_key, r.repo_id, f.full_name FROM repo_ids r
JOIN forge_repos f ON f.repo_id = r.repo_id WHERE r.repo_key IN (?) AND lower(f.full_name) <> r.repo_key ORDER BY r.repo_key`, part); err != nil {
				return err
			}
			if err := tx.SelectContext(ctx, &rows, tx.Rebind(q), args...); err != nil {
				return err
			}
			for _, r := range rows {
				out = append(out, RepoRename{Repo: spelled[r.Key], RepoID: r.ID, NewName: r.Name})
			}
		}
		return nil
	})
	return out, err
}
