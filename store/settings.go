package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jmoiron/sqlx"
)

// Setting names.
const (
	SettingKeyFingerprint = "key_fingerprint"
)

// Setting returns a daemon-wide setting; ok is false when it is unset.
func (s *Store) Setting(ctx context.Context, name string) (value string, ok bool, err error) {
	err = s.rdb.GetContext(ctx, &value, s.rdb.Rebind(`SELECT value FROM settings WHERE name = ?`), name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, s.classify(err)
	}
	return value, true, nil
}

// InitSetting sets name to value unless it is already set, and returns the
// value in force: concurrent first starts agree on one value.
func (s *Store) InitSetting(ctx context.Context, name, value string) (string, error) {
	var out string
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`), name, value); err != nil {
			return err
		}
		return tx.GetContext(ctx, &out, tx.Rebind(`SELECT value FROM settings WHERE name = ?`), name)
	})
	return out, err
}
