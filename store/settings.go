package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// SettingKeyFingerprintPrefix names the settings that record, per key id,
// the fingerprint of every key data was written with.
const SettingKeyFingerprintPrefix = "key_fingerprint:"

// Settings returns every setting whose name starts with prefix.
func (s *Store) Settings(ctx context.Context, prefix string) (map[string]string, error) {
	var rows []struct {
		Name  string `db:"name"`
		Value string `db:"value"`
	}
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(`SELECT name, value FROM settings WHERE substr(name, 1, ?) = ?`), len(prefix), prefix); err != nil {
		return nil, s.classify(err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.Name] = r.Value
	}
	return out, nil
}

// InitSetting sets name to value unless it is already set, and returns the
// value in force: concurrent first starts agree on one value.
func (s *Store) InitSetting(ctx context.Context, name, value string) (string, error) {
	var out string
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`), name, value); err != nil {
			return err
		}
		return tx.GetContext(ctx, &out, tx.Rebind(`SELECT value FROM settings WHERE name = ?`), name)
	})
	return out, err
}
