package writefail

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/checkpointd/checkpointd"
)

// formatVersion is the journal's format, in its header line.
const formatVersion = 1

// entry is one line of the journal file: JSON, newline-terminated. The
// first line is the header (Format, Replica); every later line is one of
// a note (Note, Failure), its end (Done: recorded, superseded or replaced)
// or the overflow counters (Lost, LostRecorded: cumulative).
type entry struct {
	Format       int      `json:"journal,omitempty"`
	Replica      string   `json:"replica,omitempty"`
	Note         uint64   `json:"note,omitempty"`
	Failure      *Failure `json:"failure,omitempty"`
	Done         uint64   `json:"done,omitempty"`
	Lost         int      `json:"lost,omitempty"`
	LostRecorded int      `json:"lost_recorded,omitempty"`
}

// replayed is what a journal file holds.
type replayed struct {
	replica      string
	pending      map[uint64]Failure
	next         uint64
	lost, lostOK int
	// size is the length of the well-formed part; headerLen of the header.
	size, headerLen int64
}

// errUnreadable marks a journal whose content cannot be trusted.
var errUnreadable = errors.New("the journal of failed checkpoint writes cannot be read")

// replay reads a journal. A last line cut short (a crash during its write,
// so before its fsync returned and before the failure it notes was
// answered) is dropped; anything else malformed is errUnreadable.
func replay(r io.Reader) (replayed, error) {
	out := replayed{pending: map[uint64]Failure{}}
	br := bufio.NewReader(r)
	for first := true; ; first = false {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			// A last line without its newline was cut short by a crash
			// during its write: before its fsync returned, so before the
			// failure it notes was answered. An empty file, or a torn
			// header, is a new journal.
			return out, nil
		}
		if err != nil {
			return out, err
		}
		var e entry
		if err := json.Unmarshal(bytes.TrimSuffix(line, []byte("\n")), &e); err != nil {
			return out, fmt.Errorf("%w: line at byte %d: %v", errUnreadable, out.size, err)
		}
		switch {
		case first:
			if e.Format != formatVersion || !checkpointd.ValidID(e.Replica) {
				return out, fmt.Errorf("%w: header %q", errUnreadable, bytes.TrimSpace(line))
			}
			out.replica, out.headerLen = e.Replica, int64(len(line))
		case e.Note > 0 && e.Failure != nil:
			out.pending[e.Note] = *e.Failure
			out.next = max(out.next, e.Note)
		case e.Done > 0:
			delete(out.pending, e.Done)
		case e.Lost > 0 || e.LostRecorded > 0:
			out.lost, out.lostOK = max(out.lost, e.Lost), max(out.lostOK, e.LostRecorded)
		default:
			return out, fmt.Errorf("%w: line at byte %d: %s", errUnreadable, out.size, bytes.TrimSpace(line))
		}
		out.size += int64(len(line))
	}
}

// file is the journal on disk, locked by this process.
type file struct {
	f    *os.File
	path string
}

// openFile opens (creating it 0600) and locks the journal at path: two
// replicas must not share one. The lock goes with the process.
func openFile(path string) (*file, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is locked by another checkpointd: give each replica its own --data-dir (or --write-failure-journal)", path)
	}
	return &file{f: f, path: path}, nil
}

// start writes a new journal: the header alone. It returns the header's
// length.
func (j *file) start(replica string) (int64, error) {
	line, err := encode(entry{Format: formatVersion, Replica: replica})
	if err != nil {
		return 0, err
	}
	if err := j.f.Truncate(0); err != nil {
		return 0, err
	}
	if _, err := j.f.WriteAt(line, 0); err != nil {
		return 0, err
	}
	if _, err := j.f.Seek(int64(len(line)), io.SeekStart); err != nil {
		return 0, err
	}
	return int64(len(line)), j.f.Sync()
}

// append writes es at the end and syncs: once it returns, they survive a
// crash of the process or the machine.
func (j *file) append(es ...entry) error {
	var buf []byte
	for _, e := range es {
		line, err := encode(e)
		if err != nil {
			return err
		}
		buf = append(buf, line...)
	}
	if _, err := j.f.Write(buf); err != nil {
		return err
	}
	return j.f.Sync()
}

// truncate cuts the journal back to size (the header, when nothing is
// kept): one metadata change, so a crash leaves the old or the new length.
func (j *file) truncate(size int64) error {
	if err := j.f.Truncate(size); err != nil {
		return err
	}
	if _, err := j.f.Seek(size, io.SeekStart); err != nil {
		return err
	}
	return j.f.Sync()
}

func (j *file) close() error { return j.f.Close() }

func encode(e entry) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
