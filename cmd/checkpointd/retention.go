package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd/store"
)

// retentionServeFlags configure serve's retention worker (docs/retention.md).
func retentionServeFlags(from func(string) cli.ValueSourceChain) []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "retention-interval", Value: time.Hour, Sources: from("CHECKPOINTD_RETENTION_INTERVAL"),
			Usage: "time between retention passes (the first runs one interval, at most 5m, after start); 0 turns retention off"},
		&cli.IntFlag{Name: "retain-checkpoints", Value: store.DefaultKeepCheckpoints, Sources: from("CHECKPOINTD_RETAIN_CHECKPOINTS"),
			Usage: "latest checkpoints kept per session (older ones stay while a validity change or drain decision refers to them); 0 keeps all"},
		&cli.DurationFlag{Name: "retain-ended-sessions", Value: store.DefaultEndedSessionAge, Sources: from("CHECKPOINTD_RETAIN_ENDED_SESSIONS"),
			Usage: "how long an ended session is kept before it is pruned to a tombstone; 0 keeps them"},
		&cli.DurationFlag{Name: "retain-events", Value: store.DefaultEventAge, Sources: from("CHECKPOINTD_RETAIN_EVENTS"),
			Usage: "how long events are kept, for every session; 0 keeps them"},
		&cli.DurationFlag{Name: "retain-deliveries", Value: store.DefaultDeliveryAge, Sources: from("CHECKPOINTD_RETAIN_DELIVERIES"),
			Usage: "how long webhook delivery ids are remembered for dedup; 0 keeps them"},
		&cli.DurationFlag{Name: "retain-tombstones", Value: store.DefaultTombstoneAge, Sources: from("CHECKPOINTD_RETAIN_TOMBSTONES"),
			Usage: "how long the tombstone of a cleared or pruned session is kept (its id answers 410, then 404); 0 keeps them"},
		&cli.DurationFlag{Name: "retain-idempotency-keys", Value: store.DefaultIdempotencyAge, Sources: from("CHECKPOINTD_RETAIN_IDEMPOTENCY_KEYS"),
			Usage: "how long an Idempotency-Key is remembered (a request reusing it later runs as new); 0 keeps them"},
	}
}

// retentionFrom reads serve's retention policy and interval from its flags.
func retentionFrom(c *cli.Command) (store.Retention, time.Duration, error) {
	p := store.DefaultRetention()
	p.KeepCheckpoints = c.Int("retain-checkpoints")
	p.EndedSessionAge = c.Duration("retain-ended-sessions")
	p.EventAge = c.Duration("retain-events")
	p.DeliveryAge = c.Duration("retain-deliveries")
	p.TombstoneAge = c.Duration("retain-tombstones")
	p.IdempotencyAge = c.Duration("retain-idempotency-keys")
	interval := c.Duration("retention-interval")
	switch {
	case interval < 0:
		return p, 0, fmt.Errorf("--retention-interval must not be negative, not %v", interval)
	case p.KeepCheckpoints < 0:
		return p, 0, fmt.Errorf("--retain-checkpoints must not be negative, not %d", p.KeepCheckpoints)
	case p.EndedSessionAge < 0 || p.EventAge < 0 || p.DeliveryAge < 0 || p.TombstoneAge < 0 || p.IdempotencyAge < 0:
		return p, 0, fmt.Errorf("--retain-ended-sessions, --retain-events, --retain-deliveries, --retain-tombstones and --retain-idempotency-keys must not be negative")
	}
	return p, interval, nil
}
