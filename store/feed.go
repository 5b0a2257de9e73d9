package store

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// FeedEvent is one change of the feed: an event of a session's log of a
// kind the feed carries (checkpointd.FeedKindOf), or a drain's change.
type FeedEvent struct {
	// Pos is the position just after this event: its SSE id.
	Pos FeedPos
	// Kind is the log kind, or drain.<change> for a drain's change.
	Kind      string
	SessionID string
	Repo      string
	RunID     string
	// Seq is the event's seq in its session's log (0 for a drain).
	Seq     int64
	At      time.Time
	DrainID string
	Data    json.RawMessage
}

type feedRow struct {
	N         int64  `db:"n"`
	KX        string `db:"kx"`
	SessionID string `db:"session_id"`
	Seq       int64  `db:"seq"`
	At        int64  `db:"at"`
	Kind      string `db:"kind"`
	RunID     string `db:"run_id"`
	Data      string `db:"data"`
	Repo      string `db:"repo"`
	DrainID   string `db:"drain_id"`
}

// feedKindList is the SQL list of the log kinds the feed carries: constants
// of the root package, never input.
var feedKindList = "'" + strings.Join(checkpointd.FeedLogKinds(), "', '") + "'"

// The SQLite feed: rows whose feed_id lies in (from, to].
var sqliteFeedSQL = `
SELECT n, '' AS kx, session_id, seq, at, kind, run_id, data, repo, drain_id FROM (
  SELECT e.feed_id AS n, e.session_id, e.seq, e.at, e.kind, e.run_id, e.data, s.repo, '' AS drain_id
  FROM events e JOIN sessions s ON s.id = e.session_id
  WHERE e.feed_id > ? AND e.feed_id <= ? AND e.kind IN (` + feedKindList + `)
  UNION ALL
  SELECT d.feed_id, '', d.id, d.at, 'drain.' || d.change, '', '{}', '', d.drain_id
  FROM drain_feed d WHERE d.feed_id > ? AND d.feed_id <= ?
) ORDER BY n LIMIT ?`

// The PostgreSQL feed: rows written by transactions visible in snapshot
// $2 but not in $1, after key ($3, $4, $5), in key order. The xid bounds
// let the index narrow the scan; visibility decides. Session ids compare
// bytewise (COLLATE "C"), as FeedPos.Covers compares them.
var postgresFeedSQL = `
SELECT 0 AS n, kx, session_id, seq, at, kind, run_id, data, repo, drain_id FROM (
  SELECT e.xid, e.xid::text AS kx, e.session_id, e.seq, e.at, e.kind, e.run_id, e.data, s.repo, '' AS drain_id
  FROM events e JOIN sessions s ON s.id = e.session_id
  WHERE e.xid >= pg_snapshot_xmin($1::pg_snapshot) AND e.xid < pg_snapshot_xmax($2::pg_snapshot)
    AND NOT pg_visible_in_snapshot(e.xid, $1::pg_snapshot) AND pg_visible_in_snapshot(e.xid, $2::pg_snapshot)
    AND e.kind IN (` + feedKindList + `)
  UNION ALL
  SELECT d.xid, d.xid::text, '', d.id, d.at, 'drain.' || d.change, '', '{}', '', d.drain_id
  FROM drain_feed d
  WHERE d.xid >= pg_snapshot_xmin($1::pg_snapshot) AND d.xid < pg_snapshot_xmax($2::pg_snapshot)
    AND NOT pg_visible_in_snapshot(d.xid, $1::pg_snapshot) AND pg_visible_in_snapshot(d.xid, $2::pg_snapshot)
) f WHERE (f.xid, f.session_id COLLATE "C", f.seq) > ($3::xid8, $4, $5)
ORDER BY f.xid, f.session_id COLLATE "C", f.seq LIMIT $6`

// ReadFeed returns up to limit changes after from and up to to (a FeedHead
// read after from), oldest first, with the position to read on from and
// whether more may follow before to. Call it again from next while more.
// Errors: ErrStoreUnavailable.
func (s *Store) ReadFeed(ctx context.Context, from, to FeedPos, limit int) (evs []FeedEvent, next FeedPos, more bool, err error) {
	if s.dialect != migrations.Postgres {
		if from.n >= to.n {
			return nil, from, false, nil
		}
		var rows []feedRow
		if err := s.rdb.SelectContext(ctx, &rows, sqliteFeedSQL, from.n, to.n, from.n, to.n, limit); err != nil {
			return nil, from, false, s.classify(err)
		}
		evs = make([]FeedEvent, len(rows))
		for i, r := range rows {
			p := to
			p.n = r.N
			evs[i] = r.event(p)
		}
		if len(evs) == limit {
			return evs, evs[len(evs)-1].Pos, true, nil
		}
		return evs, to, false, nil
	}
	if from.hi != "" {
		// Finish the batch a resume stopped inside first.
		evs, err := s.readBatch(ctx, from, from.hi, limit)
		if err != nil || len(evs) == limit {
			return evs, lastPos(evs, from), err == nil, err
		}
		from = FeedPos{epoch: from.epoch, at: from.at, lo: from.hi}
		if len(evs) > 0 {
			return evs, from, from.lo != to.lo, nil
		}
	}
	if from.lo == to.lo {
		return nil, from, false, nil
	}
	batch := FeedPos{epoch: from.epoch, at: to.at, lo: from.lo, kx: "0"}
	evs, err = s.readBatch(ctx, batch, to.lo, limit)
	if err != nil {
		return nil, from, false, err
	}
	if len(evs) == limit {
		return evs, evs[len(evs)-1].Pos, true, nil
	}
	return evs, to, false, nil
}

// readBatch reads the events visible in hi but not in p.lo after p's key.
func (s *Store) readBatch(ctx context.Context, p FeedPos, hi string, limit int) ([]FeedEvent, error) {
	kx := p.kx
	if kx == "" {
		kx = "0"
	}
	var rows []feedRow
	if err := s.rdb.SelectContext(ctx, &rows, postgresFeedSQL, p.lo, hi, kx, p.ks, p.kq, limit); err != nil {
		return nil, s.classify(err)
	}
	evs := make([]FeedEvent, len(rows))
	for i, r := range rows {
		evs[i] = r.event(FeedPos{epoch: p.epoch, at: p.at, lo: p.lo, hi: hi, kx: r.KX, ks: r.SessionID, kq: r.Seq})
	}
	return evs, nil
}

func lastPos(evs []FeedEvent, or FeedPos) FeedPos {
	if len(evs) == 0 {
		return or
	}
	return evs[len(evs)-1].Pos
}

func (r feedRow) event(p FeedPos) FeedEvent {
	e := FeedEvent{Pos: p, Kind: r.Kind, SessionID: r.SessionID, Repo: r.Repo, RunID: r.RunID, At: fromMicros(r.At),
		DrainID: r.DrainID, Data: json.RawMessage(r.Data)}
	if r.DrainID == "" {
		e.Seq = r.Seq
	}
	return e
}
