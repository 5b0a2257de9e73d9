package main

import (
	"runtime/debug"
	"strings"
)

// releaseVersion is the version of a release build, stamped by the linker:
//
//	go build -ldflags "-X main.releaseVersion=v1.4.0" ./cmd/checkpointd
//
// Empty otherwise: the module version or the VCS revision the go command
// records says which code this is (docs/upgrade.md).
var releaseVersion string

// releaseVersionVar is releaseVersion's name for -ldflags -X.
const releaseVersionVar = "main.releaseVersion"

// version is what `checkpointd version` prints after the program name.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return versionString(releaseVersion, bi)
}

// versionString names the build: the release version, else the module
// version (go install …@v1.4.0), else "devel"; then the VCS revision, its
// commit time and whether the tree had uncommitted changes, when the go
// command recorded them (a build in a git checkout; not in a git worktree,
// nor with -buildvcs=false), and the Go version. A build that recorded
// nothing says so rather than print a bare "(devel)".
func versionString(release string, bi *debug.BuildInfo) string {
	v := release
	if v == "" && bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if v == "" {
		v = "devel"
	}
	var details []string
	if bi != nil {
		var rev, at string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			what := "revision " + rev[:min(len(rev), 12)]
			if at != "" {
				what += ", " + at
			}
			if modified {
				what += ", modified"
			}
			details = append(details, what)
		}
	}
	if v == "devel" && len(details) == 0 {
		details = append(details, "no version or revision recorded: see docs/upgrade.md")
	}
	if bi != nil && bi.GoVersion != "" {
		details = append(details, bi.GoVersion)
	}
	if len(details) == 0 {
		return v
	}
	return v + " (" + strings.Join(details, "; ") + ")"
}
