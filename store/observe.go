package store

import (
	"context"
	"errors"
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
// true and nothing changes. Errors: ErrStoreUnavailable.
func (s *Store) ApplyDelivery(ctx context.Context, d DeliveryRecord, obs []checkpointd.Observation) (effects *checkpointd.ObservationEffects, duplicate bool, err error) {
	ctx = s.noting(ctx, CauseWebhook)
	now := s.now()
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		effects, duplicate = newEffects(), false
		res, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO deliveries (id, event, forge, repo_key, received_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`),
			d.ID, d.Event, d.Forge, strings.ToLower(d.Repo), micros(now))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			duplicate = true
			return nil
		}
		for _, o := range obs {
			if err := s.observe(ctx, tx, o, now, effects); err != nil {
				return err
			}
		}
		b, _ := jsonMarshal(effects)
		_, err = tx.ExecContext(ctx, tx.Rebind(`UPDATE deliveries SET effects = ? WHERE id = ?`), b, d.ID)
		return err
	})
	if err != nil || duplicate {
		return nil, duplicate, err
	}
	return effects, false, nil
}

// Observe applies observations that come with no delivery (reconcile).
// Errors: ErrStoreUnavailable.
func (s *Store) Observe(ctx context.Context, obs []checkpointd.Observation) (*checkpointd.ObservationEffects, error) {
	ctx = s.noting(ctx, CauseReconcile)
	now := s.now()
	var effects *checkpointd.ObservationEffects
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		effects = newEffects()
		for _, o := range obs {
			if err := s.observe(ctx, tx, o, now, effects); err != nil {
				return err
			}
		}
		return nil
	})
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
}

const upsertLiveRef = `
INSERT INTO live_refs (repo_key, ref, head, state, observed_at, source) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (repo_key, ref) DO UPDATE SET head = excluded.head, state = excluded.state,
    observed_at = excluded.observed_at, source = excluded.source`

// observe records one observation as the ref's live state and re-judges
// every active session bound to the ref.
func (s *Store) observe(ctx context.Context, tx *sqlx.Tx, o checkpointd.Observation, now time.Time, eff *checkpointd.ObservationEffects) error {
	repoKey, ref := strings.ToLower(o.Repo), o.RefName()
	if o.RepoID > 0 {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO forge_repos (repo_id, full_name, seen_at) VALUES (?, ?, ?)
ON CONFLICT (repo_id) DO UPDATE SET full_name = excluded.full_name, seen_at = excluded.seen_at`), o.RepoID, o.Repo, micros(now)); err != nil {
			return err
		}
	}
	var prev liveRefRow
	err := tx.GetContext(ctx, &prev, tx.Rebind(`SELECT head, state, observed_at, source FROM live_refs WHERE repo_key = ? AND ref = ?`), repoKey, ref)
	if err = ignoreNoRows(err); err != nil {
		return err
	}
	state := checkpointd.RefOpen
	switch {
	case o.End != "":
		state = o.End
	case o.Authoritative || prev.State == "":
	case checkpointd.LiveRefState(prev.State).Gone() && o.PR == 0:
		// A push to a deleted branch name recreates the branch.
	case checkpointd.LiveRefState(prev.State).Gone():
		// A PR that ended stays ended until the forge says it reopened.
		if o.Before == "" && prev.State != string(checkpointd.RefMerged) {
			state = checkpointd.RefOpen // reopened
		} else {
			return nil
		}
	case o.Before != "" && !strings.EqualFold(prev.Head, o.Before) && !strings.EqualFold(prev.Head, o.Head):
		// A push that does not continue the head we hold arrived out of
		// order (or is a stale redelivery): the evidence is ambiguous.
		state = checkpointd.RefAmbiguous
		eff.Ambiguous++
	}
	if _, err := tx.ExecContext(ctx, tx.Rebind(upsertLiveRef), repoKey, ref, o.Head, string(state), micros(now), o.Source); err != nil {
		return err
	}
	eff.LiveRefs++
	if err := s.rejudgeRef(ctx, tx, repoKey, o, state, now, eff); err != nil {
		return err
	}
	if state.Gone() {
		return s.releaseRefLeases(ctx, tx, repoKey, o, now, eff)
	}
	return nil
}

type boundSession struct {
	ID       string `db:"id"`
	Head     string `db:"head"`
	Validity string `db:"validity"`
	LeasesOK bool   `db:"leases_ok"`
}

// rejudgeRef applies the shared validity rule to every active session bound
// to the observed ref, and records each change with its evidence.
func (s *Store) rejudgeRef(ctx context.Context, tx *sqlx.Tx, repoKey string, o checkpointd.Observation, state checkpointd.LiveRefState, now time.Time, eff *checkpointd.ObservationEffects) error {
	q, arg := `SELECT id, head, validity, leases_ok FROM sessions WHERE repo_key = ? AND branch = ? AND state = 'active'`, any(o.Branch)
	if o.PR > 0 {
		q, arg = `SELECT id, head, validity, leases_ok FROM sessions WHERE repo_key = ? AND pr = ? AND state = 'active'`, o.PR
	}
	var bound []boundSession
	if err := tx.SelectContext(ctx, &bound, tx.Rebind(q), repoKey, arg); err != nil {
		return err
	}
	live := o.Head
	if state == checkpointd.RefAmbiguous {
		live = ""
	}
	type change struct{ from, to, reason string }
	groups := map[change][]string{}
	for _, b := range bound {
		if b.Validity == string(checkpointd.ValidityInvalidated) {
			continue // final
		}
		to, reason := checkpointd.JudgeValidity(checkpointd.ValidityEvidence{
			Invalidated: state.Gone(), LeasesHeld: b.LeasesOK, Head: b.Head, LiveHead: live})
		if string(to) == b.Validity {
			continue
		}
		c := change{b.Validity, string(to), reason}
		groups[c] = append(groups[c], b.ID)
	}
	evidence := map[string]any{"source": o.Source, "ref": o.RefName(), "observed_head": o.Head, "ref_state": state}
	for c, ids := range groups {
		if err := setValidityMany(ctx, tx, ids, now, checkpointd.Validity(c.from), checkpointd.Validity(c.to), c.reason, evidence); err != nil {
			return err
		}
		eff.Sessions[c.to] += len(ids)
	}
	return nil
}

// releaseRefLeases releases the leases of a ref that ended: the PR's leases
// when it closed or merged, the branch's when it was deleted.
func (s *Store) releaseRefLeases(ctx context.Context, tx *sqlx.Tx, repoKey string, o checkpointd.Observation, now time.Time, eff *checkpointd.ObservationEffects) error {
	res := checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: repoKey, Branch: o.Branch}
	if o.PR > 0 {
		res = checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: repoKey, Number: o.PR}
	}
	var id string
	err := tx.GetContext(ctx, &id, tx.Rebind(`SELECT lease_id FROM lease_resources WHERE resource_key = ? AND lease_id <> ''`), res.Key())
	if err != nil {
		return ignoreNoRows(err)
	}
	l, err := s.getLease(ctx, tx, id)
	if err != nil {
		return err
	}
	if err := s.endLease(ctx, tx, l, checkpointd.LeaseReleased, "ref_"+string(o.End), now); err != nil {
		if errors.Is(err, errLeaseUnchanged) {
			return nil
		}
		return err
	}
	eff.LeasesReleased++
	return nil
}
