package gitdir

import (
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// openRegular opens a regular file under its root, and nothing else.
// It looks before it opens: an O_PATH descriptor names the file without
// opening it (a device's open routine never runs, a named pipe sees no
// reader); only once fstat says regular is the file opened for reading,
// through that same descriptor, so what was checked is what is read even
// if an agent swaps the name meanwhile.
func openRegular(p place) (*os.File, fs.FileInfo, error) {
	if p.dir.err != nil {
		return nil, nil, p.dir.err
	}
	h, err := p.dir.root.OpenFile(p.rel, unix.O_PATH, 0)
	if err != nil {
		return nil, nil, cause(err)
	}
	defer h.Close()
	fi, err := h.Stat()
	if err != nil {
		return nil, nil, cause(err)
	}
	if err := checkRegular(fi); err != nil {
		return nil, nil, err
	}
	f, err := reopen(h)
	if err != nil {
		return nil, nil, err
	}
	if again, err := f.Stat(); err != nil || !os.SameFile(fi, again) {
		f.Close()
		return nil, nil, errNotRegular
	}
	return f, fi, nil
}

// reopen opens for reading the file an O_PATH descriptor names, through
// /proc/self/fd: the descriptor, not a path, decides which file (the one
// already resolved inside the root).
func reopen(h *os.File) (*os.File, error) {
	// O_NONBLOCK and O_NOCTTY cost nothing on a regular file and keep the
	// open harmless should it ever be something else.
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(h.Fd())), os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("reopening a checked file (is /proc mounted?): %w", cause(err))
	}
	return f, nil
}
