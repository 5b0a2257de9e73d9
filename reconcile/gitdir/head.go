package gitdir

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// Errors of ReadHead. ErrOutsideRoots and ErrNotWorktree mean nothing is
// there to report (the caller skips the path); the others say why a work
// tree could not be read.
var (
	// ErrOutsideRoots: the path is not under any root; nothing was read.
	ErrOutsideRoots = errors.New("not under a worktree root")
	// ErrNotWorktree: no such directory, or one without a .git.
	ErrNotWorktree = errors.New("not a git work tree")
	// ErrEscapesRoots: a .git file or commondir names a directory outside
	// the roots; it is not followed.
	ErrEscapesRoots = errors.New("names a directory outside the worktree roots; not followed")
	// ErrUnborn: HEAD names a branch with no commit yet.
	ErrUnborn = errors.New("HEAD names a branch that has no commit yet")
	// ErrReftable: the refs are in a reftable, which is not read.
	ErrReftable = errors.New("the repository keeps its refs in a reftable, which reconcile does not read")
)

// Head is what a work tree's HEAD names.
type Head struct {
	// Ref is the full name of the branch HEAD is on (refs/heads/…), ""
	// when HEAD is detached.
	Ref string
	// Commit is the object name HEAD resolves to (40 or 64 lower-case
	// hex digits), "" with ErrUnborn.
	Commit string
}

// Branch is Ref without refs/heads/ ("" when detached).
func (h Head) Branch() string { return strings.TrimPrefix(h.Ref, "refs/heads/") }

// ReadHead reads the HEAD of the work tree at path (absolute): the
// directory that holds .git, not one below it. Nothing is read when path
// is not under a root. Errors: ErrOutsideRoots, ErrNotWorktree (skip the
// path); ErrEscapesRoots, ErrUnborn (with Head.Ref set), ErrReftable, or
// an error naming the file that could not be read or parsed — symbolic
// links that lead out of a root fail there.
func (r *Roots) ReadHead(path string) (Head, error) {
	if !filepath.IsAbs(path) {
		return Head{}, ErrOutsideRoots
	}
	wt, ok := r.locate(filepath.Clean(path))
	if !ok {
		return Head{}, ErrOutsideRoots
	}
	fi, err := stat(wt)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Head{}, ErrNotWorktree
	case err != nil:
		return Head{}, fmt.Errorf("the worktree cannot be read: %w", err)
	case !fi.IsDir():
		return Head{}, ErrNotWorktree
	}
	g, err := r.open(wt)
	if err != nil {
		return Head{}, err
	}
	return g.head()
}

// open finds the git directory of the work tree wt and its common
// directory.
func (r *Roots) open(wt place) (*repo, error) {
	dotGit := wt.child(".git")
	fi, err := stat(dotGit)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, ErrNotWorktree
	case err != nil:
		return nil, fmt.Errorf(".git cannot be read: %w", err)
	}
	g := &repo{gitDir: dotGit}
	if !fi.IsDir() {
		// A linked worktree or a submodule: "gitdir: <path>", relative to
		// the work tree.
		raw, err := readSmall(dotGit)
		if err != nil {
			return nil, fmt.Errorf(".git cannot be read: %w", err)
		}
		name, ok := strings.CutPrefix(strings.TrimRight(string(raw), " \t\r\n"), "gitdir: ")
		if !ok || name == "" || strings.ContainsAny(name, "\x00\n") {
			return nil, errors.New(".git is a file that names no git directory")
		}
		if g.gitDir, ok = r.join(wt, name); !ok {
			return nil, fmt.Errorf("the .git file %w", ErrEscapesRoots)
		}
	}
	g.common = g.gitDir
	raw, err := readSmall(g.gitDir.child("commondir"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return g, nil
	case err != nil:
		return nil, fmt.Errorf("commondir cannot be read: %w", err)
	}
	name := strings.TrimRight(string(raw), " \t\r\n")
	if name == "" || strings.ContainsAny(name, "\x00\n") {
		return nil, errors.New("commondir names no directory")
	}
	var ok bool
	if g.common, ok = r.join(g.gitDir, name); !ok {
		return nil, fmt.Errorf("commondir %w", ErrEscapesRoots)
	}
	return g, nil
}

// head reads HEAD and resolves it.
func (g *repo) head() (Head, error) {
	raw, err := readSmall(g.gitDir.child("HEAD"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Head{}, errors.New("not a git directory: it has no HEAD")
	case err != nil:
		return Head{}, fmt.Errorf("HEAD cannot be read: %w", err)
	}
	content := strings.TrimRight(string(raw), " \t\r\n")
	target, symbolic := symref(content)
	if !symbolic {
		oid, ok := objectName(content)
		if !ok {
			return Head{}, errors.New("HEAD holds neither a ref nor an object name")
		}
		return Head{Commit: oid}, nil
	}
	if target == "refs/heads/.invalid" {
		return Head{}, ErrReftable // what git writes in HEAD beside a reftable
	}
	if !validRefName(target) {
		return Head{}, errors.New("HEAD names a malformed ref")
	}
	oid, err := g.resolve(target)
	switch {
	case errors.Is(err, errNoRef):
		return Head{Ref: target}, ErrUnborn
	case err != nil:
		return Head{Ref: target}, err
	}
	return Head{Ref: target, Commit: oid}, nil
}
