package gitdir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// Bounds on what one worktree can make reconcile read.
const (
	// MaxFileBytes bounds HEAD, a loose ref, a ".git" file and commondir
	// (a ref is 41 or 65 bytes; a path at most a few KiB).
	MaxFileBytes = 8 << 10
	// MaxPackedRefsBytes and MaxPackedRefs bound the scan of packed-refs.
	MaxPackedRefsBytes = 16 << 20
	MaxPackedRefs      = 100_000
	// maxSymrefDepth is git's own limit on symbolic refs naming symbolic
	// refs.
	maxSymrefDepth = 5
)

var (
	errNotRegular = errors.New("not a regular file")
	errIsDir      = errors.New("is a directory")
)

// checkRegular refuses anything but a regular file.
func checkRegular(fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return errIsDir
	case !fi.Mode().IsRegular():
		return errNotRegular
	}
	return nil
}

// readSmall reads a whole file of at most MaxFileBytes. Errors wrap
// fs.ErrNotExist when there is no such file, errIsDir for a directory.
func readSmall(p place) ([]byte, error) {
	f, _, err := openRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	switch {
	case err != nil:
		return nil, cause(err)
	case len(b) > MaxFileBytes:
		return nil, fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	return b, nil
}

// stat is Stat under p's root, errors without their path.
func stat(p place) (fs.FileInfo, error) {
	if p.dir.err != nil {
		return nil, p.dir.err
	}
	fi, err := p.dir.root.Stat(p.rel)
	return fi, cause(err)
}
