package gitdir

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"unicode/utf8"
)

// maxRefName bounds a ref name (git has no limit; a path component does).
const maxRefName = 1024

// validRefName reports whether name is a full ref name git would accept
// (git check-ref-format, under refs/): it is joined to a directory, so it
// must never climb out of it, and it ends up in a report.
func validRefName(name string) bool {
	if len(name) > maxRefName || !strings.HasPrefix(name, "refs/") || !utf8.ValidString(name) ||
		strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") ||
		strings.Contains(name, "..") || strings.Contains(name, "@{") {
		return false
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return false
		}
	}
	for comp := range strings.SplitSeq(name, "/") {
		if comp == "" || comp[0] == '.' || strings.HasSuffix(comp, ".lock") {
			return false
		}
	}
	return true
}

// objectName returns s, lower-cased, when it is a SHA-1 (40 hex digits)
// or SHA-256 (64) object name.
func objectName(s string) (string, bool) {
	if len(s) != 40 && len(s) != 64 {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		// Not s[i]|0x20: that maps control bytes 0x10-0x19 onto the digits.
		c := s[i]
		if c >= 'A' && c <= 'F' {
			c += 'a' - 'A'
		}
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return strings.ToLower(s), true
}

// symref returns the target of a symbolic ref's content ("ref:", spaces,
// the name), as git reads it.
func symref(content string) (string, bool) {
	target, ok := strings.CutPrefix(content, "ref:")
	return strings.TrimLeft(target, " \t"), ok
}

// errNoRef: the ref is neither loose nor packed (an unborn branch).
var errNoRef = errors.New("no such ref")

// repo is a git directory and its common directory (the same one but for
// a linked worktree, whose refs/ and packed-refs are shared).
type repo struct {
	gitDir place
	common place
}

// perWorktree reports whether a ref lives in the worktree's own git
// directory rather than the common one (git's rule).
func perWorktree(name string) bool {
	for _, p := range []string{"refs/worktree/", "refs/bisect/", "refs/rewritten/"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// resolve follows name (a valid ref name) through symbolic refs to an
// object name. Errors: errNoRef for a ref that does not exist; a message
// naming the ref otherwise.
func (g *repo) resolve(name string) (string, error) {
	for range maxSymrefDepth {
		dir := g.common
		if perWorktree(name) {
			dir = g.gitDir
		}
		raw, err := readSmall(dir.child(name))
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, errIsDir):
			return g.packed(name)
		case err != nil:
			return "", fmt.Errorf("read %s: %w", name, err)
		}
		content := strings.TrimRight(string(raw), " \t\r\n")
		if target, ok := symref(content); ok {
			if !validRefName(target) {
				return "", fmt.Errorf("%s is a symbolic ref to a malformed ref name", name)
			}
			name = target
			continue
		}
		oid, ok := objectName(content)
		if !ok {
			return "", fmt.Errorf("%s holds no object name", name)
		}
		return oid, nil
	}
	return "", fmt.Errorf("symbolic refs nest deeper than %d", maxSymrefDepth)
}

// packed looks name up in packed-refs, reading at most MaxPackedRefsBytes
// and MaxPackedRefs refs; a sorted file is read only up to where name
// would be. Peeled lines ("^…", a tag's target) are skipped. A last line
// without its newline (a file cut short, or one that grew past the bound
// while read) is not trusted: git refuses such a file too.
func (g *repo) packed(name string) (string, error) {
	f, fi, err := openRegular(g.common.child("packed-refs"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", errNoRef
	case err != nil:
		return "", fmt.Errorf("read packed-refs: %w", err)
	}
	defer f.Close()
	if fi.Size() > MaxPackedRefsBytes {
		return "", fmt.Errorf("packed-refs is larger than %d bytes; not read", MaxPackedRefsBytes)
	}
	rd := bufio.NewReaderSize(io.LimitReader(f, MaxPackedRefsBytes), 4<<10)
	want := []byte(name)
	sorted, refs := false, 0
	for {
		line, err := rd.ReadSlice('\n')
		switch {
		case errors.Is(err, io.EOF) && len(line) == 0:
			return "", errNoRef
		case errors.Is(err, io.EOF):
			return "", errors.New("packed-refs ends in the middle of a line")
		case errors.Is(err, bufio.ErrBufferFull):
			return "", errors.New("packed-refs has a line longer than any ref")
		case err != nil:
			return "", fmt.Errorf("read packed-refs: %w", cause(err))
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 || line[0] == '^' {
			continue
		}
		if traits, ok := bytes.CutPrefix(line, []byte("# pack-refs with:")); ok {
			sorted = slices.Contains(strings.Fields(string(traits)), "sorted")
			continue
		}
		if line[0] == '#' {
			continue
		}
		if refs++; refs > MaxPackedRefs {
			return "", fmt.Errorf("%s is not among the first %d refs of packed-refs; no more are read", name, MaxPackedRefs)
		}
		oid, ref, ok := bytes.Cut(line, []byte(" "))
		if !ok {
			return "", errors.New("packed-refs is malformed")
		}
		switch c := bytes.Compare(ref, want); {
		case c == 0:
			if o, ok := objectName(string(oid)); ok {
				return o, nil
			}
			return "", fmt.Errorf("packed-refs holds no object name for %s", name)
		case c > 0 && sorted:
			return "", errNoRef
		}
	}
}
