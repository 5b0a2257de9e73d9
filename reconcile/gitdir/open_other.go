//go:build !linux

package gitdir

import (
	"io/fs"
	"os"
	"syscall"
)

// openRegular opens a regular file under its root. Without Linux's O_PATH
// it looks first (stat), opens with O_NONBLOCK so a named pipe cannot
// block, and checks again that the file opened is the file looked at.
func openRegular(p place) (*os.File, fs.FileInfo, error) {
	if p.dir.err != nil {
		return nil, nil, p.dir.err
	}
	fi, err := p.dir.root.Stat(p.rel)
	if err != nil {
		return nil, nil, cause(err)
	}
	if err := checkRegular(fi); err != nil {
		return nil, nil, err
	}
	f, err := p.dir.root.OpenFile(p.rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, cause(err)
	}
	if again, err := f.Stat(); err != nil || !os.SameFile(fi, again) {
		f.Close()
		return nil, nil, errNotRegular
	}
	return f, fi, nil
}
