package store

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// What a completion vouches for is prepared while the drain runs
// (drain_vouches, migration 00037). VouchReady reads back the latest
// checkpoint of every session ready for the running drain, off any lock,
// and records its seq; the completion then reads back only the sessions
// whose latest changed since (written since the last pass, or never
// vouched), keeps the rows of the sessions active at its commit, and
// those rows are what NoteDrainCompleted turns into drain.completed events
// after it committed. A completion thus costs the sessions written since
// the last pass, not every session: the read-back of 100k documents and
// 100k events are off its path.
//
// A read-back holds for the drain it was made for: a document damaged in
// the store after its session was vouched for and before the completion
// is not seen by this completion (the next read of it is refused).

// vouchChunk is how many sessions one step of the pass reads.
const vouchChunk = 1000

// vouchRow is a session the pass or a completion considers.
type vouchRow struct {
	ID            string `db:"id"`
	CheckpointSeq int64  `db:"checkpoint_seq"`
	Vouched       int64  `db:"vouched"`
}

// selectUnvouched pages through the active sessions in id order from
// after, ready for the drain of the epoch (ready is the filter), with the
// seq vouched for (0: none).
func selectUnvouched(ready string) string {
	return `SELECT s.id, s.checkpoint_seq, COALESCE(v.checkpoint_seq, 0) AS vouched
FROM (SELECT id, checkpoint_seq FROM sessions WHERE state = 'active' AND id > ?` + ready + ` ORDER BY id LIMIT ?) s
LEFT JOIN drain_vouches v ON v.epoch = ? AND v.session_id = s.id ORDER BY s.id`
}

// readyForDrain is what VouchReady reads back: the sessions that do not
// block the drain of the epoch (blockingWhere, writtenBeforeWhere).
const readyForDrain = ` AND drain_ready AND validity = 'valid' AND (current_run_id = '' OR checkpoint_epoch >= ?)`

// VouchReady reads back the latest checkpoint of every session ready for
// the running drain whose latest is not vouched for yet, a chunk at a time,
// and records the seq of those that read back whole; one that does not is
// marked unreadable (it blocks as unknown). It returns how many it
// vouched for. Nothing is done while no drain runs, and it stops when the
// drain ends. Errors: ErrStoreUnavailable, ErrKey (no keys: nothing is
// vouched for or marked).
func (s *Store) VouchReady(ctx context.Context) (int, error) {
	n, _, err := s.vouchReady(ctx)
	return n, err
}

// vouchReady is VouchReady, and says whether a drain runs.
func (s *Store) vouchReady(ctx context.Context) (total int, running bool, err error) {
	row, err := openDrain(ctx, s.rdb)
	if err != nil {
		return 0, false, s.classify(err)
	}
	if row == nil || row.State != string(checkpointd.DrainRunning) {
		return 0, false, nil
	}
	total, err = s.vouchRunning(ctx, row)
	return total, true, err
}

func (s *Store) vouchRunning(ctx context.Context, row *drainRow) (int, error) {
	total := 0
	for after := ""; ; {
		var rows []vouchRow
		if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(selectUnvouched(readyForDrain)), after, row.Epoch, vouchChunk, row.Epoch); err != nil {
			return total, s.classify(err)
		}
		if len(rows) == 0 {
			return total, nil
		}
		after = rows[len(rows)-1].ID
		good, err := s.readBackUnvouched(ctx, s.rdb, rows)
		if err != nil {
			return total, err
		}
		if len(good) == 0 {
			continue
		}
		stopped := false
		err = s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
			// A completion decides under the drain row's lock: the rows
			// of a drain it completed meanwhile are its own.
			var state string
			err := tx.GetContext(ctx, &state, tx.Rebind(`SELECT state FROM drains WHERE id = ?`+s.dialectSQL("", " FOR SHARE")), row.ID)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if stopped = state != string(checkpointd.DrainRunning); stopped {
				return nil
			}
			return upsertVouches(ctx, tx, row.Epoch, good)
		})
		if err != nil || stopped {
			return total, err
		}
		total += len(good)
	}
}

// readBackUnvouched reads back the latest checkpoint of each row not
// vouched for at its seq and returns those that read back whole. Those
// that do not are marked unreadable; an *unreadableError is not returned:
// the pass goes on, the sessions block.
func (s *Store) readBackUnvouched(ctx context.Context, q sqlx.ExtContext, rows []vouchRow) ([]latestRef, error) {
	var refs []latestRef
	for _, r := range rows {
		if r.Vouched != r.CheckpointSeq {
			refs = append(refs, latestRef{ID: r.ID, Seq: r.CheckpointSeq})
		}
	}
	if len(refs) == 0 {
		return nil, nil
	}
	checks := s.startReadBacks()
	defer checks.stop()
	if err := checks.fetch(ctx, q, refs); err != nil {
		return nil, s.classify(err)
	}
	bad, err := checks.wait()
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		if err := s.markUnreadable(ctx, bad); err != nil {
			return nil, err
		}
	}
	good := refs[:0]
	for _, r := range refs {
		if _, ok := bad[r.ID]; !ok {
			good = append(good, r)
		}
	}
	return good, nil
}

// upsertVouches records that the latest checkpoints refs name read back
// whole for the drain of epoch; a vouch for a later seq is kept.
func upsertVouches(ctx context.Context, tx sqlx.ExtContext, epoch int64, refs []latestRef) error {
	const chunk = 500
	for len(refs) > 0 {
		part := refs[:min(chunk, len(refs))]
		refs = refs[len(part):]
		args := make([]any, 0, 3*len(part))
		for _, r := range part {
			args = append(args, epoch, r.ID, r.Seq)
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO drain_vouches (epoch, session_id, checkpoint_seq) VALUES `+
			strings.Repeat("(?, ?, ?), ", len(part)-1)+`(?, ?, ?)
ON CONFLICT (epoch, session_id) DO UPDATE SET checkpoint_seq = excluded.checkpoint_seq
WHERE excluded.checkpoint_seq > drain_vouches.checkpoint_seq`), args...); err != nil {
			return err
		}
	}
	return nil
}

// The drain's readiness lock (PostgreSQL): a change that makes a ready
// session block holds it shared to its commit (the trigger
// sessions_leave_ready, migration 00037), a completion exclusively while
// it decides. SQLite's one writer needs none.
const (
	lockReadiness = `SELECT pg_advisory_xact_lock(` + lockSQL + `)`
	readinessLock = "drain-readiness"
)

// vouchCut makes the drain_vouches rows of epoch the completion's cut:
// under the readiness lock (the caller's), it reads back every active
// session whose latest checkpoint is not vouched for at its seq, records
// those, and drops the rows of sessions no longer active. It returns how
// many sessions the cut holds, or an *unreadableError naming the latest
// checkpoints that do not read back.
func (s *Store) vouchCut(ctx context.Context, tx *sqlx.Tx, epoch int64) (int64, error) {
	// One join, not a walk by id: the cut is every active session.
	var fresh []latestRef
	if err := tx.SelectContext(ctx, &fresh, tx.Rebind(`SELECT s.id, s.checkpoint_seq AS seq FROM sessions s
LEFT JOIN drain_vouches v ON v.epoch = ? AND v.session_id = s.id
WHERE s.state = 'active' AND (v.checkpoint_seq IS NULL OR v.checkpoint_seq <> s.checkpoint_seq)`), epoch); err != nil {
		return 0, err
	}
	checks := s.startReadBacks()
	defer checks.stop()
	for part := fresh; len(part) > 0; part = part[min(vouchChunk, len(part)):] {
		if err := checks.fetch(ctx, tx, part[:min(vouchChunk, len(part))]); err != nil {
			return 0, err
		}
	}
	bad, err := checks.wait()
	if err != nil {
		return 0, err
	}
	if len(bad) > 0 {
		return 0, &unreadableError{latest: bad}
	}
	if err := upsertVouches(ctx, tx, epoch, fresh); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM drain_vouches WHERE epoch = ? AND NOT EXISTS
(SELECT 1 FROM sessions s WHERE s.id = drain_vouches.session_id AND s.state = 'active')`), epoch); err != nil {
		return 0, err
	}
	var n int64
	err = tx.GetContext(ctx, &n, tx.Rebind(`SELECT COUNT(*) FROM drain_vouches WHERE epoch = ?`), epoch)
	return n, err
}

// NoteDrainCompleted records each completed drain in the event log of
// every session its cut holds (vouchCut), with the checkpoint it vouched
// for and the decision's time, a chunk of sessions per transaction, each
// row deleted with its event; the rows of a cancelled drain are dropped.
// A crash leaves the rest for the next call (every pass of
// RunDrainVouches, and the gate after each completion): nothing is noted
// twice. A session's own events after the decision may come before the
// note in its log. It returns how many sessions it noted. Errors:
// ErrStoreUnavailable.
func (s *Store) NoteDrainCompleted(ctx context.Context) (int, error) {
	var owed []drainRow
	if err := s.rdb.SelectContext(ctx, &owed, `SELECT `+drainColumns+` FROM drains d
WHERE state IN ('completed', 'cancelled') AND EXISTS (SELECT 1 FROM drain_vouches v WHERE v.epoch = d.epoch) ORDER BY epoch`); err != nil {
		return 0, s.classify(err)
	}
	total := 0
	for _, d := range owed {
		for {
			var n int
			err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) (err error) {
				n, err = s.noteCut(ctx, tx, d)
				return err
			})
			if err != nil {
				return total, err
			}
			if n == 0 {
				break
			}
			if d.State == string(checkpointd.DrainCompleted) {
				total += n
			}
		}
	}
	return total, nil
}

// noteCut notes (or, for a cancelled drain, drops) one chunk of the cut of
// d and returns its size; 0: none is left.
func (s *Store) noteCut(ctx context.Context, tx *sqlx.Tx, d drainRow) (int, error) {
	var cut []latestRef
	// Another replica's pass takes other rows.
	if err := tx.SelectContext(ctx, &cut, tx.Rebind(`SELECT session_id AS id, checkpoint_seq AS seq FROM drain_vouches
WHERE epoch = ? ORDER BY session_id LIMIT ?`+s.dialectSQL("", " FOR UPDATE SKIP LOCKED")), d.Epoch, decisionChunk); err != nil {
		return 0, err
	}
	if len(cut) == 0 {
		return 0, nil
	}
	ids := make([]string, len(cut))
	for i, c := range cut {
		ids[i] = c.ID
	}
	if _, err := execIn(ctx, tx, `DELETE FROM drain_vouches WHERE epoch = ? AND session_id IN (?)`, d.Epoch, ids); err != nil {
		return 0, err
	}
	if d.State != string(checkpointd.DrainCompleted) {
		return len(cut), nil
	}
	if s.dialect == migrations.Postgres {
		// Locked in id order, as every lock of sessions.
		var locked []string
		if err := selectIn(ctx, tx, &locked, `SELECT id FROM sessions WHERE id IN (?) ORDER BY id FOR UPDATE`, ids); err != nil {
			return 0, err
		}
	}
	var seqs []struct {
		ID       string `db:"id"`
		EventSeq int64  `db:"event_seq"`
	}
	if err := selectIn(ctx, tx, &seqs, `UPDATE sessions SET event_seq = event_seq + 1 WHERE id IN (?) RETURNING id, event_seq`, ids); err != nil {
		return 0, err
	}
	eventSeq := make(map[string]int64, len(seqs))
	for _, r := range seqs {
		eventSeq[r.ID] = r.EventSeq
	}
	evs := make([]eventInsert, 0, len(cut))
	for _, c := range cut {
		seq, ok := eventSeq[c.ID]
		if !ok {
			continue // deleted by retention since: no log to note in
		}
		evs = append(evs, eventInsert{sessionID: c.ID, seq: seq, kind: checkpointd.EventDrainCompleted, checkpointSeq: c.Seq,
			data: completedEvent{DrainID: d.ID, Outcome: checkpointd.DrainOutcomeCompleted, CheckpointSeq: c.Seq}})
	}
	at := fromMicros(d.EndedAt.Int64)
	if err := insertEvents(ctx, tx, at, evs); err != nil {
		return 0, err
	}
	return len(cut), nil
}

// vouchEvery is how often RunDrainVouches runs its passes: while a drain
// runs, a read of every active session in chunks and of the documents of
// those written since the last pass. After a pass that found nothing to
// read back, the next ones wait twice as long each time, up to
// vouchIdleMax: an idle drain at 100k is not walked every two seconds.
const (
	vouchEvery   = 2 * time.Second
	vouchIdleMax = 32 * time.Second
)

// RunDrainVouches runs NoteDrainCompleted every two seconds, and
// VouchReady as often while it finds work, until ctx ends. Run it under
// RunExclusive: one replica vouches.
func (s *Store) RunDrainVouches(ctx context.Context) error {
	var skip, idle int // ticks to skip; passes in a row that found nothing
	return every(ctx, vouchEvery, func(ctx context.Context) {
		if n, err := s.NoteDrainCompleted(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("drain: recording the completion in the sessions' logs failed; the next pass resumes",
				slog.String("err", err.Error()))
		} else if n > 0 {
			s.log.Info("drain: completion recorded in the sessions' logs", slog.Int("count", n))
		}
		if skip > 0 {
			skip--
			return
		}
		start := time.Now()
		n, running, err := s.vouchReady(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("drain: reading back the ready sessions' latest checkpoints failed; a completion reads them back itself, and the next pass resumes",
				slog.String("err", err.Error()))
		}
		if n > 0 {
			s.log.Info("drain: latest checkpoints read back for the completion", slog.Int("count", n), slog.Duration("took", time.Since(start)))
		}
		if n > 0 || err != nil || !running {
			idle = 0
			return
		}
		idle++
		skip = min(1<<min(idle, 5), int(vouchIdleMax/vouchEvery)) - 1
	})
}
