// Package envvar is the environment variable behind a command-line flag,
// shared by the commands (cmd/checkpointd, cmd/checkpointd-loadtest).
package envvar

import "github.com/urfave/cli/v3"

// From returns, for a variable name, the flag source that reads it through
// getenv (os.Getenv; tests pass their own). An empty value counts as unset.
func From(getenv func(string) string) func(name string) cli.ValueSourceChain {
	return func(name string) cli.ValueSourceChain { return cli.NewValueSourceChain(source{name, getenv}) }
}

type source struct {
	name   string
	getenv func(string) string
}

func (s source) Lookup() (string, bool) {
	v := s.getenv(s.name)
	return v, v != ""
}
func (s source) String() string   { return "environment variable " + s.name }
func (s source) GoString() string { return "env{" + s.name + "}" }

// IsFromEnv lets the help text show the variable.
func (s source) IsFromEnv() bool { return true }

// Key names the variable (cli.EnvValueSource), for the help text and for
// the test that checks docs/configuration.md.
func (s source) Key() string { return s.name }
