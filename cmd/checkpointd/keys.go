package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// keySource says where the server keys come from.
type keySource struct {
	file     string // key file path
	explicit bool   // the file was configured, not the default: it must exist
	env      string // CHECKPOINTD_KEY; wins over the file

	defaultFile string // <data-dir>/checkpointd.key, for messages
}

// loadKeys returns the server keyring: the one readKeys read before the
// store was opened, or, when that found no default key file, a new key
// file for a database that has never seen a key. It checks every key's
// fingerprint against the ones the database recorded. Every failure
// refuses the start: without the right keys, digests cannot be compared
// and sealed data cannot be read.
func loadKeys(ctx context.Context, s *store.Store, src keySource, kr *checkpointd.Keyring) (*checkpointd.Keyring, error) {
	recorded, err := s.Settings(ctx, store.SettingKeyFingerprintPrefix)
	if err != nil {
		return nil, fmt.Errorf("read key fingerprints: %w", err)
	}
	if kr == nil {
		if kr, err = createDefaultKey(src, recorded); err != nil {
			return nil, err
		}
	}
	for name, fp := range recorded {
		id := strings.TrimPrefix(name, store.SettingKeyFingerprintPrefix)
		switch got := kr.Fingerprint(id); {
		case got == "":
			return nil, fmt.Errorf("key %s (%s) is missing: the database holds data sealed with it; restore the key file it was in", id, fp)
		case got != fp:
			return nil, fmt.Errorf("key mismatch: the database was written with key %s %s but the loaded key %s is %s; "+
				"start with the key the database was written with (key file or CHECKPOINTD_KEY)", id, fp, id, got)
		}
	}
	for _, id := range kr.IDs() {
		fp := kr.Fingerprint(id)
		inForce, err := s.InitSetting(ctx, store.SettingKeyFingerprintPrefix+id, fp)
		if err != nil {
			return nil, fmt.Errorf("record key fingerprint: %w", err)
		}
		if inForce != fp {
			return nil, fmt.Errorf("key mismatch: the database was written with key %s %s but the loaded key %s is %s", id, inForce, id, fp)
		}
	}
	return kr, nil
}

// readKeys reads the keyring from CHECKPOINTD_KEY or the key file, before
// anything is created: a bad key refuses the start with the data
// directory untouched. A missing default key file is no error here (nil,
// nil): loadKeys creates it for a new database. A missing configured file
// is an error whatever the database holds: it is never created. A key
// file other users may read or write is used, with a warning (docs/keys.md
// says why).
func readKeys(src keySource, log *slog.Logger) (*checkpointd.Keyring, error) {
	if src.env != "" {
		kr, err := checkpointd.ParseKeyring(src.env)
		if err != nil {
			return nil, fmt.Errorf("CHECKPOINTD_KEY: %w", err)
		}
		return kr, nil
	}
	b, mode, err := openKeyFile(src.file)
	if err == nil && mode&0o077 != 0 {
		log.Warn("the key file is open to other users: anyone who reads it can forge digests and open sealed data",
			slog.String("file", src.file), slog.String("mode", fmt.Sprintf("%04o", mode)),
			slog.String("fix", "chmod 600 "+src.file))
	}
	switch {
	case err == nil:
		kr, err := checkpointd.ParseKeyring(string(b))
		if err != nil {
			return nil, fmt.Errorf("key file %s: %w", src.file, err)
		}
		return kr, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("key file %s is unreadable: %w", src.file, err)
	case src.explicit:
		// Said before the database is opened, so it claims nothing about
		// what the database holds.
		return nil, fmt.Errorf("key file %s does not exist; a configured key file is never created: restore it, "+
			"or leave --key-file and CHECKPOINTD_KEY_FILE unset to have a new database create %s", src.file, src.defaultFile)
	}
	return nil, nil
}

// createDefaultKey writes a new default key file, for a database that has
// never recorded a key; one that has needs the key it recorded.
func createDefaultKey(src keySource, recorded map[string]string) (*checkpointd.Keyring, error) {
	if len(recorded) > 0 {
		var with []string
		for name, fp := range recorded {
			with = append(with, strings.TrimPrefix(name, store.SettingKeyFingerprintPrefix)+" "+fp)
		}
		sort.Strings(with)
		return nil, fmt.Errorf("key file %s is missing but the database was written with key %s; restore the key file or set CHECKPOINTD_KEY",
			src.file, strings.Join(with, ", "))
	}
	kr, err := checkpointd.ParseKeyring("k1 " + checkpointd.EncodeKey(checkpointd.NewKey()))
	if err != nil {
		return nil, err
	}
	if err := writeKeyFile(src.file, kr, false); err != nil {
		return nil, err
	}
	return kr, nil
}

// openKeyFile returns the content of the key file and its permission bits,
// both of the file it opened (a symlink's target).
func openKeyFile(path string) ([]byte, fs.FileMode, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	b, err := io.ReadAll(f)
	return b, st.Mode().Perm(), err
}

// writeKeyFile writes the keyring readable only by its owner, atomically:
// a crash leaves the old file or the new one, never half of either. Without
// replace it never overwrites an existing file.
func writeKeyFile(path string, kr *checkpointd.Keyring, replace bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".checkpointd.key.*")
	if err != nil {
		return fmt.Errorf("write key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(kr.Format())
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && !replace {
		// Link fails if path exists, so two first starts cannot both win.
		err = os.Link(tmp.Name(), path)
	} else if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write key file: %w", err)
	}
	return nil
}

// keySourceFrom reads where the keys come from out of the flags and the
// environment.
func keySourceFrom(c *cli.Command, getenv func(string) string) keySource {
	src := keySource{file: c.String("key-file"), explicit: true, env: getenv("CHECKPOINTD_KEY"),
		defaultFile: filepath.Join(c.String("data-dir"), "checkpointd.key")}
	if src.file == "" {
		src.file, src.explicit = src.defaultFile, false
	}
	return src
}

// keyCommand rotates the server keys.
func keyCommand(from func(string) cli.ValueSourceChain, dataFlags []cli.Flag, getenv func(string) string, stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "key",
		Usage: "manage the server keys",
		Flags: append([]cli.Flag{&cli.StringFlag{Name: "key-file", Sources: from("CHECKPOINTD_KEY_FILE"),
			Usage: "server key file (default <data-dir>/checkpointd.key)"}}, dataFlags...),
		Commands: []*cli.Command{{
			Name: "rotate",
			Usage: "add a new key to the key file; after a restart it seals new data, " +
				"and the old keys keep opening what they sealed",
			Action: func(ctx context.Context, c *cli.Command) error {
				src := keySourceFrom(c, getenv)
				if src.env != "" {
					return errors.New("the keys come from CHECKPOINTD_KEY: append \"; k<N+1> <base64 of 32 random bytes>\" to it " +
						"(e.g. head -c32 /dev/urandom | base64) and restart the daemon")
				}
				b, err := os.ReadFile(src.file)
				if err != nil {
					return fmt.Errorf("read key file: %w", err)
				}
				kr, err := checkpointd.ParseKeyring(string(b))
				if err != nil {
					return fmt.Errorf("key file %s: %w", src.file, err)
				}
				id, err := kr.Rotate()
				if err != nil {
					return err
				}
				if err := writeKeyFile(src.file, kr, true); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "added key %s to %s; restart the daemon to seal with it (keep the old keys: they open older data)\n", id, src.file)
				return nil
			},
		}},
	}
}
