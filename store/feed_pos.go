package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// FeedPos is a position in the change feed: what a watcher has seen. Its
// String is the SSE event id a client sends back as Last-Event-ID.
//
// On SQLite it is a feed_id: every event with a larger one is unseen.
//
// On PostgreSQL it is a snapshot lo (every event whose transaction is
// visible in lo was seen) and, inside a batch, the batch's end snapshot hi
// and the key (xid, session_id, seq) of the last event delivered of those
// visible in hi but not in lo. The batch is read in key order, so the rest
// of it is "key greater than that". A complete position has no hi.
type FeedPos struct {
	epoch string
	// at is when the position's newest snapshot (or count) was read: how
	// old a resume is (the backlog bound).
	at time.Time
	n  int64
	lo string
	hi string
	kx string
	ks string
	kq int64
}

// At is when the position was the head of the feed.
func (p FeedPos) At() time.Time { return p.at }

// IsZero reports whether p is no position at all.
func (p FeedPos) IsZero() bool { return p.epoch == "" }

const feedPosVersion = "1"

// String encodes the position for an SSE id: dot-separated fields (no
// field can hold a dot, a newline or a NUL).
func (p FeedPos) String() string {
	head := feedPosVersion + "." + p.epoch + "." + strconv.FormatInt(p.at.Unix(), 10) + "."
	switch {
	case p.lo == "":
		return head + strconv.FormatInt(p.n, 10)
	case p.hi == "":
		return head + p.lo
	}
	return head + p.lo + "." + p.hi + "." + p.kx + "." + p.ks + "." + strconv.FormatInt(p.kq, 10)
}

// Reasons a position cannot be resumed from (FeedResetError).
const (
	FeedResetUnparsable = "unparsable"
	FeedResetOtherFeed  = "other_feed"
	FeedResetTooOld     = "too_old"
	FeedResetAhead      = "ahead"
)

// FeedResetError says a Last-Event-ID cannot be resumed from, and why: the
// watcher is told to reset (docs/watch.md).
type FeedResetError struct{ Reason string }

func (e *FeedResetError) Error() string { return "feed position cannot be resumed: " + e.Reason }

var (
	snapshotPattern = regexp.MustCompile(`^[0-9]{1,20}:[0-9]{1,20}:([0-9]{1,20}(,[0-9]{1,20})*)?$`)
	numberPattern   = regexp.MustCompile(`^[0-9]{1,20}$`)
)

// maxFeedPos bounds an id taken from a client: a snapshot lists the
// transactions in progress, a few dozen numbers, not kilobytes.
const maxFeedPos = 8 << 10

// ParseFeedPos reads a Last-Event-ID. A position that is malformed, of
// another database, older than backlog (0: no bound but retention) or
// ahead of the feed is a *FeedResetError. Other errors: ErrStoreUnavailable.
func (s *Store) ParseFeedPos(ctx context.Context, id string, backlog time.Duration) (FeedPos, error) {
	unparsable := &FeedResetError{Reason: FeedResetUnparsable}
	if len(id) > maxFeedPos {
		return FeedPos{}, unparsable
	}
	f := strings.Split(id, ".")
	if len(f) < 4 || f[0] != feedPosVersion || !numberPattern.MatchString(f[2]) {
		return FeedPos{}, unparsable
	}
	sec, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return FeedPos{}, unparsable
	}
	p := FeedPos{epoch: f[1], at: time.Unix(sec, 0).UTC()}
	if s.dialect == migrations.Postgres {
		switch len(f) {
		case 4:
			p.lo = f[3]
		case 8:
			p.lo, p.hi, p.kx, p.ks = f[3], f[4], f[5], f[6]
			if !snapshotPattern.MatchString(p.hi) || !numberPattern.MatchString(p.kx) || (p.ks != "" && !checkpointd.ValidID(p.ks)) {
				return FeedPos{}, unparsable
			}
			if p.kq, err = strconv.ParseInt(f[7], 10, 64); err != nil {
				return FeedPos{}, unparsable
			}
		default:
			return FeedPos{}, unparsable
		}
		if !snapshotPattern.MatchString(p.lo) {
			return FeedPos{}, unparsable
		}
	} else {
		if len(f) != 4 || !numberPattern.MatchString(f[3]) {
			return FeedPos{}, unparsable
		}
		if p.n, err = strconv.ParseInt(f[3], 10, 64); err != nil {
			return FeedPos{}, unparsable
		}
	}
	head, err := s.FeedHead(ctx)
	if err != nil {
		return FeedPos{}, err
	}
	if p.epoch != head.epoch {
		return FeedPos{}, &FeedResetError{Reason: FeedResetOtherFeed}
	}
	if backlog > 0 && head.at.Sub(p.at) > backlog {
		return FeedPos{}, &FeedResetError{Reason: FeedResetTooOld}
	}
	ahead, err := s.feedAhead(ctx, p, head)
	if err != nil {
		return FeedPos{}, err
	}
	if ahead {
		return FeedPos{}, &FeedResetError{Reason: FeedResetAhead}
	}
	return p, nil
}

// feedAhead reports whether p lies past head: a position from a copy of
// this database restored from a backup that has not caught up, which would
// silently skip what the copy writes next. On PostgreSQL the snapshots'
// syntax is checked by the casts too.
func (s *Store) feedAhead(ctx context.Context, p, head FeedPos) (bool, error) {
	if s.dialect != migrations.Postgres {
		return p.n > head.n, nil
	}
	hi := p.hi
	if hi == "" {
		hi = p.lo
	}
	var ahead bool
	err := s.rdb.GetContext(ctx, &ahead, `SELECT pg_snapshot_xmax($1::pg_snapshot) > pg_snapshot_xmax($3::pg_snapshot)
OR pg_snapshot_xmax($2::pg_snapshot) > pg_snapshot_xmax($3::pg_snapshot)
OR pg_snapshot_xmin($2::pg_snapshot) < pg_snapshot_xmin($1::pg_snapshot)`, p.lo, hi, head.lo)
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code.Class() == "22" {
		return false, &FeedResetError{Reason: FeedResetUnparsable}
	}
	if err != nil {
		return false, s.classify(err)
	}
	return ahead, nil
}

// FeedHead returns the feed's current end: a watcher starting there sees
// every change committed after this call.
func (s *Store) FeedHead(ctx context.Context) (FeedPos, error) {
	var row struct {
		Epoch string `db:"epoch"`
		N     int64  `db:"n"`
		Snap  string `db:"snap"`
	}
	q := `SELECT epoch, last_id AS n, '' AS snap FROM feed WHERE id = 1`
	if s.dialect == migrations.Postgres {
		q = `SELECT epoch, 0 AS n, pg_current_snapshot()::text AS snap FROM feed WHERE id = 1`
	}
	if err := s.rdb.GetContext(ctx, &row, q); err != nil {
		return FeedPos{}, s.classify(fmt.Errorf("read the feed head: %w", err))
	}
	return FeedPos{epoch: row.Epoch, at: s.now(), n: row.N, lo: row.Snap}, nil
}

// Covers returns a test of whether an event was already delivered to a
// watcher at p: at or before it in the feed. A watcher that resumes from
// an id another replica gave it may be ahead of this replica's reader,
// whose next events it then partly has; it skips those. A snapshot lists
// what was visible: transactions below xmin, and those below xmax not in
// progress (xip).
func (p FeedPos) Covers() func(FeedEvent) bool {
	if p.lo == "" {
		return func(e FeedEvent) bool { return e.Pos.n <= p.n }
	}
	lo, hi := parseSnapshot(p.lo), parseSnapshot(p.hi)
	return func(e FeedEvent) bool {
		xid, err := strconv.ParseUint(e.Pos.kx, 10, 64)
		if err != nil {
			return false
		}
		if lo.visible(xid) {
			return true
		}
		if p.hi == "" || !hi.visible(xid) {
			return false
		}
		// Inside the batch p stopped in: delivered up to p's key.
		if px, _ := strconv.ParseUint(p.kx, 10, 64); xid != px {
			return xid < px
		}
		if e.SessionID != p.ks {
			return e.SessionID < p.ks
		}
		return e.Seq <= p.kq
	}
}

type snapshot struct {
	xmin, xmax uint64
	xip        map[uint64]bool
}

func parseSnapshot(s string) snapshot {
	var sn snapshot
	f := strings.SplitN(s, ":", 3)
	if len(f) != 3 {
		return sn
	}
	sn.xmin, _ = strconv.ParseUint(f[0], 10, 64)
	sn.xmax, _ = strconv.ParseUint(f[1], 10, 64)
	sn.xip = map[uint64]bool{}
	for _, x := range strings.Split(f[2], ",") {
		if n, err := strconv.ParseUint(x, 10, 64); err == nil {
			sn.xip[n] = true
		}
	}
	return sn
}

// visible mirrors pg_visible_in_snapshot for a committed transaction.
func (sn snapshot) visible(xid uint64) bool {
	return xid < sn.xmin || (xid < sn.xmax && !sn.xip[xid])
}
