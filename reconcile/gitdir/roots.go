// Package gitdir reads what a git work tree's HEAD names from the
// repository's files, without running git or any other program: a
// worktree is agent input, and its repository's config can name programs
// (filters, fsmonitor, hooks) that git would run as the daemon's user.
//
// It reads only under the directories the operator allowed (Roots), each
// opened as an os.Root so that no symbolic link or ".." leads a read out of
// them, and it bounds every read. It understands a .git directory, a
// ".git" file ("gitdir: …", as linked worktrees and submodules have) with
// the git directory's "commondir", HEAD (symbolic or detached), loose refs
// and packed-refs, with SHA-1 and SHA-256 object names. It does not read
// the config, the index or any object.
package gitdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Roots are the directories worktrees may be read under. The zero value
// (and Open(nil)) holds none, and then nothing is ever read.
type Roots struct {
	dirs []rootDir
}

type rootDir struct {
	// names are the configured absolute path and, when it differs, the
	// same directory with its symbolic links resolved: a recorded path may
	// use either.
	names []string
	root  *os.Root
	err   error // why the directory could not be opened
}

// Open opens each directory as a root. A directory that cannot be opened
// is kept, and every worktree under it reads as that error; Open itself
// does not fail, so one missing root never hides the others.
func Open(dirs []string) *Roots {
	r := &Roots{}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			r.dirs = append(r.dirs, rootDir{names: []string{d}, err: fmt.Errorf("worktree root %q is not an absolute path", d)})
			continue
		}
		d = filepath.Clean(d)
		rd := rootDir{names: []string{d}}
		// The operator's directories, not agent input: these are the only
		// host paths looked at outside an os.Root.
		if real, err := filepath.EvalSymlinks(d); err == nil && real != d {
			rd.names = append(rd.names, real)
		}
		rd.root, rd.err = os.OpenRoot(d)
		if rd.err != nil {
			// %v: the root missing is not the worktree missing.
			rd.err = fmt.Errorf("worktree root %s cannot be opened: %v", d, cause(rd.err))
		}
		r.dirs = append(r.dirs, rd)
	}
	return r
}

// Close closes the roots.
func (r *Roots) Close() error {
	var errs []error
	for _, d := range r.dirs {
		if d.root != nil {
			errs = append(errs, d.root.Close())
		}
	}
	return errors.Join(errs...)
}

// place is a file or directory under a root: the root and the path
// relative to it, with the absolute path it was found under (to which a
// relative path read from a file is joined).
type place struct {
	dir *rootDir
	rel string
	abs string
}

// locate finds the root that lexically holds path (absolute and clean),
// the innermost one when roots nest. No file is looked at.
func (r *Roots) locate(path string) (place, bool) {
	var best place
	longest := -1
	for i := range r.dirs {
		d := &r.dirs[i]
		for _, name := range d.names {
			rel, err := filepath.Rel(name, path)
			if err == nil && filepath.IsLocal(rel) && len(name) > longest {
				best, longest = place{dir: d, rel: rel, abs: path}, len(name)
			}
		}
	}
	return best, longest >= 0
}

// join is the place of name (a path read from a file: absolute, or
// relative to p), which must lie under a root.
func (r *Roots) join(p place, name string) (place, bool) {
	if !filepath.IsAbs(name) {
		name = filepath.Join(p.abs, name)
	}
	return r.locate(filepath.Clean(name))
}

// child is the place of a name inside directory p (name is local).
func (p place) child(name string) place {
	return place{dir: p.dir, rel: filepath.Join(p.rel, name), abs: filepath.Join(p.abs, name)}
}

// cause strips the path from a *PathError: the path is the caller's to
// name (and may come from a file an agent wrote).
func cause(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
